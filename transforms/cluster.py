"""DPStreamCluster (Alg. 1) as keyed Beam stages, each a labelled composite transform over the
core's own state machines (``dpstream.epochs``, ``dpstream.merge_reduce``, ``dpstream.blocks``,
``dpstream.sparse_vector``); no stage imports ``dpstream.engine``. ``docs/beam-graph.md`` draws the
graph; for the same seed and rows the releases equal the library's (``Engine`` / ``RunSequence``).

Stages and keys (r = run, s = point shard, e = epoch index, i = ring):

* :class:`ShardTicks` — key s, the job's only tick timer (batch: one firing at the last tick;
  looping: one per tick, guarded). Freezes each tick's points, clips them to the public ball and
  emits, for *every* tick (⊥ heartbeats included), the shard's point count to ``EpochPlan`` and
  its points to ``RouteByEpoch``.
* :class:`EpochPlan` — key r: the run's stream counter (the DP count estimate) and the epoch
  schedule (:class:`dpstream.epochs.EpochPlanner`): every tick's epoch, flush and adoption flags.
  A function of the DP count alone (with the bicriteria: of the CenterRegistry's updates), so it
  is loop-free. Broadcast to every shard's router and to ``ReleaseCoreset``.
* :class:`RouteByEpoch` — key (r, s): sends each tick's points, with its plan, to the copy of the
  per-epoch stages of the tick's epoch (one tagged output per epoch index).
* per epoch index e < E_max = ⌊log2 T⌋ + 2 (:func:`dpstream.rules.max_epochs`), a copy of
  :class:`AssignRings` (key (r, s): ring and nearest center of each point from epoch e's centers,
  one *partial leaf sketch* per (tick, ring) — sketches add up, so no point crosses the shuffle
  with the tree semicoreset), :class:`RingMergeReduce` (key (r, i): the ring's sparse vector, open
  block and merge-reduce levels; one record per tick to ``ReleaseCoreset``) and
  :class:`EpochClose` (key r: at the epoch's adoption tick, the epoch's coreset and the next
  epoch's ring centers = [F] + the centers released at that tick, broadcast to the shards of copy
  e + 1; the closed epochs' coresets ride with shard 0's copy to ring 0 and so to
  ``EpochClose[e+1]``). This unrolls the loop "release → ring centers → rings → release" over
  the public number of epochs.
* :class:`ReleaseCoreset` — one key for the whole job: the per-tick combine of already-reduced
  coresets (B of the closed epochs' coresets and the open rings' levels; the window of runs).
* :class:`ClusterCoreset` — stateless, after a pass-through keyed by global tick (a Reshuffle
  would drop the BundleBasedDirectRunner's late releases): each released coreset → k centers and
  window centers (a fresh k-means++ fit: parallel across ticks) → ``Release.to_dict()``.

The tick contract (DESIGN §4): every stage after ``ShardTicks`` gates on *data*, never on the
watermark: it processes tick t of a key once every upstream record it needs for t is in its state
(stored by tick, never "the latest"), and every upstream stage emits a record for every tick, empty
ticks included. State values are read, rebuilt and written once per element; a key's state is
cleared when its epoch or run ends. Only ``ShardTicks`` (and the bicriteria levels) have timers,
each with a pipeline-unique name and a guard against obsolete firings. The seed is read from a
file in ``setup`` and never pickled: noise sources are re-attached after every state read.

Operator metrics (namespace ``dpstream``): ``points_processed``, ``clipped``, ``after_close``,
``obsolete_timer_firings``, ``ticks_released``. Exact counts: telemetry only.
"""
from __future__ import annotations

import functools
import logging
import pickle
from collections import OrderedDict
from typing import Any, NamedTuple, Optional, Tuple

import numpy as np

import apache_beam as beam
from apache_beam.coders import BytesCoder, PickleCoder
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.window import GlobalWindows, TimestampedValue

from dpstream import epochs, rules
from dpstream.merge_reduce import RingMergeReduce as _Ring, reduce as _reduce
from dpstream.noise import NoiseSource, fingerprint
from dpstream.params import EngineConfig
from dpstream.privacy import PrivacyPlan
from dpstream.release import Release
from dpstream.rings import assign_parts, clip_to_ball
from dpstream.semicoresets import WeightedSet, make_semicoreset
from dpstream.sparse_vector import LevelZeroAboveThreshold
from transforms.keystats import KeyStats
from transforms.parse import NAMESPACE
from transforms.tick_timer import MODES, TickSchedule, take_ticks_upto
from transforms.ticks import TickClock, _Partial, merge_partials

_log = logging.getLogger("dpstream")
RELEASE_KEY = 0
IntKeyed = Tuple[int, Any]
PairKeyed = Tuple[Tuple[int, int], Any]


def load_seed(path: str) -> bytes:
    """The secret master seed from a file (local path or any Beam filesystem URL).
    Surrounding whitespace is ignored; at least 16 bytes are required."""
    with FileSystems.open(path) as fh:
        data = fh.read().strip()
    if len(data) < 16:
        raise ValueError(f"the seed file {path} must hold at least 16 bytes (e.g. `head -c 32 /dev/urandom | "
                         f"base64 > {path}`)")
    return bytes(data)


def _as_partial(points, dim: int) -> _Partial:
    if isinstance(points, _Partial):
        return points
    pts = np.asarray(points, dtype=np.float64).reshape(-1, dim)
    m = pts.shape[0]
    return _Partial(pts, np.full(m, -1, np.int64), np.full(m, np.nan), np.array([""] * m, dtype=str))


# --------------------------------------------------------------------------- shared per process

class Msg:
    """One message between two stages, encoded as a single pickle (Beam's default coder would
    encode a list of tuples of arrays element by element: hundreds of thousands of small pickles)."""
    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v

    def __reduce__(self):
        return Msg, (self.v,)


def _load(state):
    """A stage's state value: stored as one pickle (bytes), so the runner's state cache sizes one
    object instead of walking every array of it on each read and write."""
    raw = state.read()
    return None if raw is None else pickle.loads(raw)


def _store(state, value) -> None:
    state.write(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def _open(item):
    return item.v if isinstance(item, Msg) else item


_PLANS: dict = {}


class _Run:
    """What every stage of one run shares, rebuilt on each worker (never pickled): the run's noise
    source (its index in every key), the privacy plan (cached per process: built once), A and M."""

    def __init__(self, cfg: EngineConfig, seed: bytes, run: int):
        self.noise = NoiseSource(seed, prefix=("run", run) if run else ())
        key = (cfg, fingerprint(seed))
        if key not in _PLANS:
            _PLANS[key] = PrivacyPlan.build(cfg, seed_hash=self.noise.seed_hash)
        self.plan = _PLANS[key]
        self.A = make_semicoreset(cfg, self.plan, self.noise)
        self.block_size = cfg.block_size if cfg.block_size is not None else rules.block_size(
            cfg, self.plan, self.A.leaf_threshold())


class _Job:
    """The public shape of a job's clustering stages (picklable: no seed)."""

    def __init__(self, cfg: EngineConfig, seed_path: str, n_shards: int, schedule: TickSchedule):
        self.cfg, self.seed_path, self.n_shards, self.schedule = cfg, seed_path, int(n_shards), schedule
        self.T = cfg.horizon_ticks
        self.n_rings = cfg.n_rings
        self.n_epochs = rules.max_epochs(cfg.horizon_ticks)
        self.z = 1 if cfg.objective == "kmedian" else 2

    def split(self, g: int):
        """Global tick g (1-based) → (run, tick within the run)."""
        return (g - 1) // self.T, (g - 1) % self.T + 1

    def glob(self, r: int, t: int) -> int:
        return r * self.T + t


def _measured(fn):
    """Run a DoFn method to the end before Beam sees its outputs, so that a key's CPU time
    (:mod:`transforms.keystats`, benchmark only) is its own work, not the downstream encoding."""
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        t0 = self._stats.start()
        outs = list(fn(self, *args, **kwargs) or ())
        self._stats.close(t0)
        return outs
    return wrapper


class _StageFn(beam.DoFn):
    """Seed, per-run objects and key telemetry of a stage."""

    STAGE = "stage"

    def __init__(self, job: _Job, label: str = None):
        self.job = job
        self.label = label or self.STAGE

    def setup(self):
        self._seed = load_seed(self.job.seed_path)
        self._runs = OrderedDict()
        self._stats = KeyStats(self.label)

    def run(self, r: int) -> _Run:
        ctx = self._runs.get(r)
        if ctx is None:
            ctx = self._runs[r] = _Run(self.job.cfg, self._seed, r)
            while len(self._runs) > 2:
                self._runs.popitem(last=False)
        return ctx

    def finish_bundle(self):
        self._stats.flush()

    def teardown(self):
        if hasattr(self, "_stats"):
            self._stats.flush()


# --------------------------------------------------------------------------- ShardTicks

class _ShardTicksFn(_StageFn):
    STAGE = "ShardTicks"
    META = userstate.ReadModifyWriteStateSpec("dpstream_shard_meta", PickleCoder())
    BUFFER = userstate.BagStateSpec("dpstream_shard_buffer", PickleCoder())
    TICK = userstate.TimerSpec("dpstream_shard_tick", TimeDomain.WATERMARK)

    def setup(self):
        super().setup()
        c = lambda name: Metrics.counter(NAMESPACE, name)  # noqa: E731
        self._c_points, self._c_clipped = c("points_processed"), c("clipped")
        self._c_closed, self._c_obsolete = c("after_close"), c("obsolete_timer_firings")

    @_measured
    def process(self, element, key=beam.DoFn.KeyParam, meta=beam.DoFn.StateParam(META),
                buf=beam.DoFn.StateParam(BUFFER), timer=beam.DoFn.TimerParam(TICK)):
        _, item = element
        item = _open(item)
        self._stats.note(key)
        sched = self.job.schedule
        m = meta.read()
        if m is None:  # the first element (the start marker or data): arm the first tick
            m = {"done": 0, "fired": 0, "armed": sched.first_armed()}
            meta.write(m)
            timer.set(sched.close_time(m["armed"]))
        if item[0] != "tick":
            return
        g, part = item[1], item[2]
        if g <= m["fired"]:  # its tick is closed: frozen, never reopened
            n = int(part.points.shape[0])
            self._c_closed.inc(n)
            _log.warning("dpstream: %d point(s) of tick %d arrived after the tick closed; dropped "
                         "(raise --allowed_lateness_seconds if this recurs)", n, g)
            return
        buf.add((g, part))

    @userstate.on_timer(TICK)
    @_measured
    def on_tick(self, ts=beam.DoFn.TimestampParam, key=beam.DoFn.KeyParam, meta=beam.DoFn.StateParam(META),
                buf=beam.DoFn.StateParam(BUFFER), timer=beam.DoFn.TimerParam(TICK)):
        sched = self.job.schedule
        m = meta.read()
        if m is None or m["armed"] is None:
            self._c_obsolete.inc()
            return
        want = sched.close_time(m["armed"])
        if ts != want:  # an obsolete firing of a timer that was re-set: restore it, do nothing
            self._c_obsolete.inc()
            timer.set(want)
            return
        fired = m["armed"]
        nxt = sched.next_armed(fired)
        meta.write({"done": fired, "fired": fired, "armed": nxt})
        if nxt is not None:
            timer.set(sched.close_time(nxt))
        pending = take_ticks_upto(buf, fired)
        cfg, job = self.job.cfg, self.job
        counts, points = {}, {}
        n_all = 0
        for g in range(m["done"] + 1, fired + 1):
            parts = pending.pop(g, None)
            x = merge_partials(parts).points if parts else np.zeros((0, cfg.dim))
            x, nclip = clip_to_ball(np.array(x, dtype=np.float64), cfg.center_vec, cfg.radius)
            if nclip:
                self._c_clipped.inc(nclip)
            n = int(x.shape[0])
            n_all += n
            r, t = job.split(g)
            counts.setdefault(r, []).append((t, n))
            points.setdefault(r, []).append((t, x))
        self._c_points.inc(n_all)
        for r in sorted(counts):
            yield r, Msg(("count", key, counts[r]))
            yield beam.pvalue.TaggedOutput("points", ((r, key), Msg(("points", points[r]))))
        self._stats.note(key, points=n_all)


class ShardTicks(beam.PTransform):
    """``((shard, global tick), points | _Partial)`` → ``(counts, points)``: per run and tick, every
    shard's point count (to :class:`EpochPlan`) and its clipped points (to :class:`RouteByEpoch`),
    empty ticks included."""

    def __init__(self, job: _Job, label: Optional[str] = None):
        super().__init__(label)
        self.job = job

    def expand(self, ticks):
        dim = self.job.cfg.dim
        data = (ticks | "KeyByShard" >> beam.Map(lambda kv: (int(kv[0][0]), ("tick", int(kv[0][1]),
                                                                          _as_partial(kv[1], dim))))
                .with_output_types(IntKeyed)
                | "DataWindow" >> beam.WindowInto(GlobalWindows()))
        start = (ticks.pipeline | "StartClock" >> beam.Create([(s, ("start",)) for s in range(self.job.n_shards)])
                 .with_output_types(IntKeyed))
        out = ((data, start) | "WithStart" >> beam.Flatten()
               | "Shards" >> beam.ParDo(_ShardTicksFn(self.job)).with_input_types(IntKeyed)
               .with_outputs("points", main="counts"))
        return out.counts, out.points


# --------------------------------------------------------------------------- EpochPlan

class Small(NamedTuple):
    """The part of a tick's plan the rings need (and F at an adoption tick)."""
    first: int
    flush: bool
    adopt: bool
    final: bool
    candidates: Optional[np.ndarray]


def _small(p) -> Small:
    return Small(p.first, p.flush, p.adopt, p.final, p.candidates)


class _EpochPlanFn(_StageFn):
    STAGE = "EpochPlan"
    STATE = userstate.ReadModifyWriteStateSpec("dpstream_plan_state", BytesCoder())

    @_measured
    def process(self, element, state=beam.DoFn.StateParam(STATE)):
        r, item = element
        item = _open(item)
        job, cfg = self.job, self.job.cfg
        st = _load(state) or {"planner": None, "pending": {}, "done": 0}
        if item[0] == "count":
            for t, n in item[2]:
                if t > st["done"]:
                    st["pending"].setdefault(t, {})[item[1]] = n
            need = job.n_shards
        else:  # ("bic", [(t, new centers, count)]): the CenterRegistry's updates
            for t, new, count in item[1]:
                if t > st["done"]:
                    st["pending"][t] = (new, count)
            need = None
        ctx = self.run(r)
        planner = st["planner"]
        if planner is None:
            planner = epochs.EpochPlanner(cfg, ctx.plan, ctx.noise, ctx.block_size)
        elif planner.counter is not None:
            planner.counter.noise = ctx.noise
        plans = []
        while True:
            t = st["done"] + 1
            got = st["pending"].get(t)
            if got is None or (need is not None and len(got) < need):
                break
            del st["pending"][t]
            plans.append(planner.step(sum(got.values())) if need is not None
                         else planner.step(bicriteria_update=got))
            st["done"] = t
        if planner.counter is not None:
            planner.counter.noise = None  # never pickled with the state (re-attached above)
        st["planner"] = planner
        if st["done"] >= job.T:
            state.clear()
        else:
            _store(state, st)
        if plans:
            msg = Msg(("plan", plans))
            for s in range(job.n_shards):
                yield (r, s), msg
            yield beam.pvalue.TaggedOutput("release", (RELEASE_KEY, Msg(("plan", r, plans))))
        self._stats.note(r, floats=planner.state_floats() + len(st["pending"]) * job.n_shards)


class EpochPlan(beam.PTransform):
    """Per-tick counts of every shard (or the CenterRegistry's updates, ``from_registry=True``) →
    ``(plans by shard, plans for ReleaseCoreset)``: one :class:`dpstream.epochs.TickPlan` per tick."""

    def __init__(self, job: _Job, from_registry: bool = False, label: Optional[str] = None):
        super().__init__(label)
        self.job, self.from_registry = job, from_registry

    def expand(self, pcoll):
        out = ((pcoll,) | "Typed" >> beam.Flatten().with_output_types(IntKeyed)
               | "Plan" >> beam.ParDo(_EpochPlanFn(self.job)).with_input_types(IntKeyed)
               .with_outputs("release", main="shards"))
        return out.shards, out.release


# --------------------------------------------------------------------------- RouteByEpoch

class _RouteFn(_StageFn):
    STAGE = "RouteByEpoch"
    STATE = userstate.ReadModifyWriteStateSpec("dpstream_route_state", BytesCoder())

    @_measured
    def process(self, element, state=beam.DoFn.StateParam(STATE)):
        key, item = element
        item = _open(item)
        st = _load(state) or {"points": {}, "plans": {}, "routed": 0}
        if item[0] == "points":
            for t, x in item[1]:
                st["points"][t] = x
        else:
            for p in item[1]:
                st["plans"][p.t] = p
        ready = sorted(set(st["points"]) & set(st["plans"]))
        out = {}
        for t in ready:
            p = st["plans"].pop(t)
            out.setdefault(p.epoch, []).append((t, st["points"].pop(t), _small(p)))
        st["routed"] += len(ready)
        if st["routed"] >= self.job.T:
            state.clear()
        else:
            _store(state, st)
        for e in sorted(out):
            yield beam.pvalue.TaggedOutput(f"e{e}", (key, Msg(("tick", out[e]))))
        self._stats.note(key, points=sum(len(x) for x in st["points"].values()))


class RouteByEpoch(beam.PTransform):
    """(shard points, shard plans) → one PCollection per epoch index: ``((r, s), ("tick", [(t, x, plan)]))``."""

    def __init__(self, job: _Job, label: Optional[str] = None):
        super().__init__(label)
        self.job = job

    def expand(self, pcolls):
        tags = [f"e{e}" for e in range(self.job.n_epochs)]
        out = (pcolls | "Flatten" >> beam.Flatten().with_output_types(PairKeyed)
               | "Route" >> beam.ParDo(_RouteFn(self.job)).with_input_types(PairKeyed)
               .with_outputs(*tags))
        return tuple(out[tag] for tag in tags)


# --------------------------------------------------------------------------- AssignRings

class _AssignRingsFn(_StageFn):
    STAGE = "AssignRings"
    STATE = userstate.ReadModifyWriteStateSpec("dpstream_assign_state", BytesCoder())

    def __init__(self, job: _Job, epoch: int, label: str = None):
        super().__init__(job, label)
        self.epoch = int(epoch)

    def setup(self):
        super().setup()
        self._dirs = {}

    def _directions(self, r: int, ctx: _Run):
        V = self._dirs.get(r)
        if V is None:
            self._dirs.clear()
            V = self._dirs[r] = [ctx.A.directions(("A", self.epoch, i)) for i in range(self.job.n_rings)]
        return V

    @_measured
    def process(self, element, state=beam.DoFn.StateParam(STATE)):
        key, item = element
        item = _open(item)
        r, s = key
        job, cfg, e = self.job, self.job.cfg, self.epoch
        st = _load(state) or {"centers": cfg.center_vec[None, :].copy() if e == 0 else None, "pending": [],
                              "n": 0, "span": None, "prev": None}
        if item[0] == "tick":
            st["pending"].extend(item[1])
        else:  # ("centers", F, coresets | None): this epoch's ring centers, from EpochClose of epoch e − 1
            st["centers"] = np.asarray(item[1], dtype=float)
            st["prev"] = item[2]  # shard 0 only: the closed epochs' coresets, passed on to ring 0
        C = st["centers"]
        if C is None or not st["pending"]:
            _store(state, st)
            self._stats.note(key, points=sum(len(x) for _, x, _ in st["pending"]))
            return
        ctx = self.run(r)
        V = self._directions(r, ctx)
        I = job.n_rings
        pending = st["pending"]
        X = np.concatenate([x for _, x, _ in pending]) if pending else np.zeros((0, cfg.dim))
        tix = np.repeat(np.arange(len(pending)), [len(x) for _, x, _ in pending])
        if len(X):
            ring, f = assign_parts(X, C, cfg.ring_base, cfg.n_rings, cfg.ring_ratio)
            order = np.argsort(ring, kind="stable")
            bounds = np.searchsorted(ring[order], np.arange(I + 1))
        else:
            order, bounds = np.zeros(0, dtype=np.int64), np.zeros(I + 1, dtype=np.int64)
        out = []
        for i in range(I):  # every ring, empty ones included (heartbeats): a loop over rings, not points
            blk = ctx.A.open_block(C, np.full(C.shape[0], float(cfg.ring_radius(i))), ("A", e, i), directions=V[i])
            sel = order[bounds[i]:bounds[i + 1]]
            parts = blk.partials(X[sel], f[sel] if len(X) else sel, tix[sel], len(pending))  # one pass per ring
            out.append([(t, part, p) for (t, _, p), part in zip(pending, parts)])
        for t, _, p in pending:
            if p.adopt or p.final:
                st["span"] = t - p.first + 1
        st["n"] += len(st["pending"])
        st["pending"] = []
        # the closed epochs' coresets (shard 0 only) go once, with this shard's first parts: ring 0
        # cannot complete a tick without them, so it holds them before its epoch can close
        prev, st["prev"] = st.get("prev"), None
        if st["span"] is not None and st["n"] >= st["span"]:
            state.clear()  # the epoch's last tick is out: this key is done
        else:
            _store(state, st)
        for i in range(I):
            yield (r, i), Msg(("part", s, C, out[i], prev if i == 0 else None))
        self._stats.note(key)


# --------------------------------------------------------------------------- RingMergeReduce

class _RingFn(_StageFn):
    STAGE = "RingMergeReduce"
    STATE = userstate.ReadModifyWriteStateSpec("dpstream_ring_state", BytesCoder())
    INBOX = userstate.BagStateSpec("dpstream_ring_inbox", PickleCoder())

    def __init__(self, job: _Job, epoch: int, label: str = None):
        super().__init__(job, label)
        self.epoch = int(epoch)

    @_measured
    def process(self, element, state=beam.DoFn.StateParam(STATE), inbox=beam.DoFn.StateParam(INBOX)):
        key, item = element
        item = _open(item)
        r, i = key
        job, cfg, e = self.job, self.job.cfg, self.epoch
        st = _load(state) or {"ring": None, "svt": None, "have": {}, "next": None, "C": None, "prev": None}
        _, s, C, entries, prev = item
        st["C"] = C
        if prev is not None:  # ring 0 of epoch e > 0: the closed epochs' coresets, for EpochClose[e]
            st["prev"] = prev
        for t, part, p in entries:
            st["have"][t] = st["have"].get(t, 0) + 1
            if st["next"] is None:
                st["next"] = p.first
        if st["have"].get(st["next"], 0) < job.n_shards:  # tick `next` is not complete: wait (data gating)
            inbox.add((s, entries))
            _store(state, st)
            self._stats.note(key)
            return
        # the inbox (a bag: appends cost one small write) holds what arrived before; read it once
        st["pending"], st["plans"] = {}, {}
        for sh, ents in list(inbox.read()) + [(s, entries)]:
            for t, part, p in ents:
                st["pending"].setdefault(t, {})[sh] = part
                st["plans"][t] = p
        inbox.clear()
        ctx = self.run(r)
        ring = svt = None
        recs, closing, done = [], None, False
        while not done and len(st["pending"].get(st["next"], ())) == job.n_shards:
            t = st["next"]
            parts, p = st["pending"].pop(t), st["plans"].pop(t)
            if ring is None:
                ring = (_Ring(cfg, ctx.noise, ctx.A, e, i, st["C"]) if st["ring"] is None
                        else _Ring.from_state(st["ring"], cfg, ctx.noise, ctx.A))
                svt = st["svt"] or LevelZeroAboveThreshold(cfg.n_rings, ctx.block_size, ctx.plan.svt_scale,
                                                           ctx.noise, ("svt", e), index=i)
                svt.noise = ctx.noise
                unmerged = []  # this firing's partial sketches not yet in the block (sums of integers)
            unmerged.extend(parts[sh] for sh in sorted(parts))
            n = sum(int(parts[sh][-1]) for sh in parts)
            before = list(ring.levels)
            release = bool(svt.step(t, np.array([n], dtype=np.int64))[0])
            if release or (p.flush and ring.last_release != t):  # a fire, or the flush (epoch change, t = 1, T)
                ring.block.merge_many(unmerged)
                unmerged = []
                ring.release_block(t)
            changed = ring.last_release == t
            delta = [(j, lv) for j, lv in enumerate(ring.levels)
                     if j >= len(before) or lv is not before[j]] if changed else None
            recs.append((t, changed, delta, len(ring.levels)))
            if p.adopt:
                closing = (t, ring.released(), p.candidates)
            st["next"] = t + 1
            done = p.adopt or p.final
        floats = 0
        if ring is not None and unmerged:
            ring.block.merge_many(unmerged)  # the state written holds one compact table
        pending, plans = st.pop("pending"), st.pop("plans")
        for t in [t for t in st["have"] if t < st["next"]]:
            del st["have"][t]
        if done:
            state.clear()
            inbox.clear()
        else:
            by_shard = {}
            for t in sorted(pending):  # later ticks wait in the inbox again
                for sh, part in pending[t].items():
                    by_shard.setdefault(sh, []).append((t, part, plans[t]))
            for sh in sorted(by_shard):
                inbox.add((sh, by_shard[sh]))
            if ring is not None:
                svt.noise = None  # never pickled (re-attached after every read)
                st["ring"], st["svt"] = ring.state(), svt
                floats = ring.state_floats()
            _store(state, st)
        if recs:
            yield RELEASE_KEY, Msg(("ring", r, e, i, recs))
        if closing is not None:
            yield beam.pvalue.TaggedOutput("close", (r, Msg(("ring", i) + closing + (st["prev"] if i == 0 else None,))))
        self._stats.note(key, floats=floats,
                         points=ring.block.n if ring is not None and not done else 0)


# --------------------------------------------------------------------------- EpochClose

class _EpochCloseFn(_StageFn):
    STAGE = "EpochClose"
    STATE = userstate.ReadModifyWriteStateSpec("dpstream_close_state", BytesCoder())

    def __init__(self, job: _Job, epoch: int, label: str = None):
        super().__init__(job, label)
        self.epoch = int(epoch)

    @_measured
    def process(self, element, state=beam.DoFn.StateParam(STATE)):
        r, item = element
        item = _open(item)
        job, cfg, e = self.job, self.job.cfg, self.epoch
        st = _load(state) or {"sets": {}, "t": None, "candidates": None, "prev": [] if e == 0 else None}
        _, i, t, S, cand, prev = item  # ring i's released set at the adoption tick t (ring 0: + the
        st["sets"][i], st["t"], st["candidates"] = S, t, cand  # coresets of the epochs before e)
        if prev is not None:
            st["prev"] = prev
        if len(st["sets"]) < job.n_rings or st["prev"] is None:
            _store(state, st)
            self._stats.note(r)
            return
        state.clear()
        ctx, t = self.run(r), st["t"]
        S = WeightedSet.concat([st["sets"][i] for i in range(job.n_rings)], cfg.dim)
        coresets = list(st["prev"]) + [_reduce(cfg, ctx.noise, S, ("B", e, "epoch", t), job.z)]
        pts, w = epochs.release_sample(cfg, ctx.noise, WeightedSet.concat(coresets, cfg.dim), e + 1, t, job.z)
        centers = epochs.release_centers(cfg, ctx.noise, pts, w, e + 1, t)
        F = np.vstack([st["candidates"], epochs.ring_centers(cfg, ctx.noise, pts, w, centers, e + 1, t)])
        # the next epoch's ring centers to every shard; the coresets so far ride with shard 0's copy
        # (AssignRings[e+1] shard 0 → RingMergeReduce[e+1] ring 0 → EpochClose[e+1]): a direct edge
        # EpochClose[e] → EpochClose[e+1] would double, copy after copy, the (empty) bundles the
        # BundleBasedDirectRunner runs for every upstream bundle (measured: 544 per key-stage of
        # copy 4 at T = 8, 12,770 bundles in all)
        msg = Msg(("centers", F, None))
        for s in range(job.n_shards):
            yield (r, s), (Msg(("centers", F, coresets)) if s == 0 else msg)
        self._stats.note(r)


class EpochStages(beam.PTransform):
    """The copy of the per-epoch stages for epoch index e: ``AssignRings`` → ``RingMergeReduce`` →
    ``EpochClose``. Input: (routed ticks of epoch e, ring centers — with the closed epochs'
    coresets for shard 0 — from copy e − 1 or None); output: (ring records for ReleaseCoreset,
    centers and coresets for copy e + 1, or None for the last copy)."""

    def __init__(self, job: _Job, epoch: int, label: Optional[str] = None):
        super().__init__(label)
        self.job, self.epoch = job, int(epoch)

    def expand(self, pcolls):
        ticks, centers = pcolls["ticks"], pcolls.get("centers")
        e = self.epoch
        ins = (ticks,) if centers is None else (ticks, centers)
        routed = ins | "AssignInputs" >> beam.Flatten().with_output_types(PairKeyed)
        parts = (routed | "AssignRings" >> beam.ParDo(_AssignRingsFn(self.job, e, f"AssignRings[{e}]"))
                 .with_input_types(PairKeyed).with_output_types(PairKeyed))
        rings = (parts | "RingMergeReduce" >> beam.ParDo(_RingFn(self.job, e, f"RingMergeReduce[{e}]"))
                 .with_input_types(PairKeyed).with_outputs("close", main="release"))
        if e + 1 >= self.job.n_epochs:  # the last epoch index: no adoption (rules.max_epochs)
            return rings.release, None
        closed = ((rings.close,) | "CloseInputs" >> beam.Flatten().with_output_types(IntKeyed)  # typed: a deterministic key coder
                  | "EpochClose" >> beam.ParDo(_EpochCloseFn(self.job, e, f"EpochClose[{e}]"))
                  .with_input_types(IntKeyed).with_output_types(PairKeyed))
        return rings.release, closed


# --------------------------------------------------------------------------- ReleaseCoreset

def _levels_set(levels, dim):
    return WeightedSet.concat([lv for lv in levels if lv is not None], dim)


class ReleaseRecord(NamedTuple):
    """What ReleaseCoreset emits per tick (DP outputs and public numbers only)."""
    run: int
    tick: int
    global_tick: int
    epoch: int
    points: np.ndarray
    weights: np.ndarray
    count: float
    n_candidates: int
    version: Tuple[int, int]          # (epoch, tick) of the refit whose keys the coreset and centers use
    window: Optional[Tuple[np.ndarray, np.ndarray]]  # B's sample of the window, None: the run itself
    window_first_run: int


class _ReleaseFn(_StageFn):
    STAGE = "ReleaseCoreset"
    STATE = userstate.ReadModifyWriteStateSpec("dpstream_release_state", BytesCoder())
    INBOX = userstate.BagStateSpec("dpstream_release_inbox", PickleCoder())

    @_measured
    def process(self, element, state=beam.DoFn.StateParam(STATE), inbox=beam.DoFn.StateParam(INBOX)):
        _, item = element
        item = _open(item)
        job, cfg = self.job, self.job.cfg
        st = _load(state) or {"g": 0, "planned": set(), "have": {}, "run": None, "closed": [], "all_time": None}
        if item[0] == "plan":
            st["planned"].update(job.glob(item[1], p.t) for p in item[2])
        else:
            for t, *_ in item[4]:
                g = job.glob(item[1], t)
                st["have"][g] = st["have"].get(g, 0) + 1
        nxt = st["g"] + 1
        if nxt not in st["planned"] or st["have"].get(nxt, 0) < job.n_rings:  # data gating: wait
            inbox.add(item)
            _store(state, st)
            self._stats.note(RELEASE_KEY)
            return
        plans, recs = {}, {}  # what arrived before (a bag: one small write per element), read once
        for it in list(inbox.read()) + [item]:
            if it[0] == "plan":
                for p in it[2]:
                    plans[job.glob(it[1], p.t)] = p
            else:
                _, r, e, i, rr = it
                for t, changed, delta, L in rr:
                    recs.setdefault(job.glob(r, t), {})[i] = (r, e, changed, delta, L)
        inbox.clear()
        out = []
        while True:
            g = st["g"] + 1
            p, got = plans.get(g), recs.get(g)
            if p is None or got is None or len(got) < job.n_rings:
                break
            del plans[g], recs[g]
            st["planned"].discard(g)
            st["have"].pop(g, None)
            out.append(self._tick(st, g, p, {i: v[2:] for i, v in got.items()}))
            st["g"] = g
        left = {}
        for g, got in recs.items():  # later ticks wait in the inbox again
            for i, (r, e, changed, delta, L) in got.items():
                left.setdefault((r, e, i), []).append((job.split(g)[1], changed, delta, L))
        for (r, e, i), rr in sorted(left.items()):
            inbox.add(("ring", r, e, i, rr))
        by_run = {}
        for g in sorted(plans):
            by_run.setdefault(job.split(g)[0], []).append(plans[g])
        for r, ps in sorted(by_run.items()):
            inbox.add(("plan", r, ps))
        _store(state, st)
        for rec in out:
            yield rec
        floats = 0
        if st["run"] is not None:
            d = cfg.dim + 1
            floats = sum(len(c) * d for c in st["run"]["closed"]) + sum(
                len(lv) * d for lvs in st["run"]["levels"].values() for lv in lvs if lv is not None)
        self._stats.note(RELEASE_KEY, floats=floats)

    def _tick(self, st, g, p, got) -> ReleaseRecord:
        job, cfg = self.job, self.job.cfg
        r, t = job.split(g)
        ctx = self.run(r)
        run = st["run"]
        if run is None or run["r"] != r:
            run = st["run"] = {"r": r, "epoch": 0, "levels": {}, "closed": [], "last": None}
        I = job.n_rings
        changed_any = False
        for i in range(I):
            changed, delta, L = got[i]
            if changed:
                changed_any = True
                lv = run["levels"].setdefault(i, [])
                lv.extend([None] * (L - len(lv)))
                for j, S in delta:
                    lv[j] = S
        e = run["epoch"]
        if p.adopt:  # the epoch's coreset (B of its rings' levels), then the next epoch
            S = WeightedSet.concat([_levels_set(run["levels"].get(i, ()), cfg.dim) for i in range(I)], cfg.dim)
            run["closed"].append(_reduce(cfg, ctx.noise, S, ("B", e, "epoch", t), job.z))
            run["levels"] = {}
            run["epoch"] = e = e + 1
        window_sets, first = self._window_sets(st, r)
        if changed_any or run["last"] is None:
            S = WeightedSet.concat(run["closed"] + [_levels_set(run["levels"].get(i, ()), cfg.dim)
                                                    for i in range(I)], cfg.dim)
            pts, w = epochs.release_sample(cfg, ctx.noise, S, e, t, job.z)
            win = epochs.window_sample(cfg, ctx.noise, window_sets, pts, w, t, job.z) if window_sets else None
            run["last"] = (pts, w, (e, t), win)
        pts, w, version, win = run["last"]
        count = max(0.0, float(p.count)) if p.count is not None else float(w.sum())
        rec = ReleaseRecord(r, t, g, e, pts, w, count, p.n_candidates, version, win, first)
        if p.final:  # the run ends: its final coreset joins the window, its state goes
            if cfg.window_runs == 0:
                st["all_time"] = epochs.all_time_merge(cfg, ctx.noise, st["all_time"], pts, w, r, job.z)
            else:
                st["closed"] = (st["closed"] + [(r, pts, w)])[-cfg.window_runs:]
            st["run"] = None
        return rec

    def _window_sets(self, st, r):
        if self.job.cfg.window_runs == 0:
            return ([] if st["all_time"] is None else [st["all_time"]]), 0
        return [(p, w) for _, p, w in st["closed"]], (st["closed"][0][0] if st["closed"] else r)


class ReleaseCoreset(beam.PTransform):
    """(plans, ring records of every epoch copy) → one :class:`ReleaseRecord` per global tick, in order."""

    def __init__(self, job: _Job, label: Optional[str] = None):
        super().__init__(label)
        self.job = job

    def expand(self, pcolls):
        return (pcolls | "Flatten" >> beam.Flatten().with_output_types(IntKeyed)
                | "Release" >> beam.ParDo(_ReleaseFn(self.job)).with_input_types(IntKeyed))


# --------------------------------------------------------------------------- ClusterCoreset

class _ClusterFn(_StageFn):
    STAGE = "ClusterCoreset"

    def setup(self):
        super().setup()
        self._memo = OrderedDict()
        self._c_released = Metrics.counter(NAMESPACE, "ticks_released")

    def _fit(self, key, fn):
        v = self._memo.get(key)
        if v is None:
            v = self._memo[key] = fn()
            while len(self._memo) > 4096:  # k·d floats each
                self._memo.popitem(last=False)
        return v

    @_measured
    def process(self, rec: ReleaseRecord):
        cfg, ctx = self.job.cfg, self.run(rec.run)
        ev, tv = rec.version
        # a pure function of (coreset, keys): a memo only skips refitting an unchanged coreset
        centers = self._fit(("c", rec.run, ev, tv),
                            lambda: epochs.release_centers(cfg, ctx.noise, rec.points, rec.weights, ev, tv))
        wc = centers if rec.window is None else self._fit(
            ("w", rec.run, tv), lambda: epochs.window_centers(cfg, ctx.noise, rec.window[0], rec.window[1], tv))
        rel = Release(tick=rec.tick, epoch=rec.epoch, centers=centers, coreset_points=rec.points,
                      coreset_weights=rec.weights, count_estimate=rec.count, n_candidate_centers=rec.n_candidates,
                      plan=ctx.plan, run=rec.run, global_tick=rec.global_tick, window_centers=wc,
                      window_first_run=rec.window_first_run)
        self._c_released.inc()
        yield TimestampedValue(rel.to_dict(), self.job.schedule.close_time(rec.global_tick))
        self._stats.note(("tick", rec.global_tick))


class _SpreadTicksFn(beam.DoFn):
    """A pass-through keyed by global tick, so a runner spreads the ticks' clustering over its
    workers (it breaks fusion with the single-key ReleaseCoreset as a Reshuffle would). Not a
    Reshuffle: its GroupByKey drops records that arrive behind the watermark, and the
    BundleBasedDirectRunner (streaming, TestStream), which keeps no watermark holds for pending
    timers, delivers the ticks released after the input's end exactly so (measured: a TestStream
    run lost its last 3 of 8 releases). A stateful DoFn drops nothing; the state is declared, never
    written (a stateful ParDo is what makes the runner shuffle by key)."""
    KEYED = userstate.ReadModifyWriteStateSpec("dpstream_spread_keyed", BytesCoder())

    def process(self, element, keyed=beam.DoFn.StateParam(KEYED)):
        yield element[1]


class ClusterCoreset(beam.PTransform):
    """Released coresets → release dicts (:meth:`dpstream.release.Release.to_dict`), timestamped at
    their tick's public close time. Stateless; first a pass-through keyed by global tick
    (:class:`_SpreadTicksFn`), so a runner spreads the ticks."""

    def __init__(self, job: _Job, spread: bool = True, label: Optional[str] = None):
        super().__init__(label)
        self.job, self.spread = job, spread

    def expand(self, pcoll):
        if self.spread:
            pcoll = (pcoll | "KeyByTick" >> beam.Map(lambda rec: (int(rec.global_tick), rec))
                     .with_output_types(Tuple[int, Any])
                     | "SpreadTicks" >> beam.ParDo(_SpreadTicksFn()).with_input_types(Tuple[int, Any]))
        return pcoll | "Cluster" >> beam.ParDo(_ClusterFn(self.job))


# --------------------------------------------------------------------------- the whole clustering part

class ClusterTicks(beam.PTransform):
    """``((shard, global tick), points | _Partial)`` → one release dict per tick (every tick of every
    run), through the stages of the module docstring.

    ``ClusterTicks(cfg, clock, seed_path, mode="batch"|"streaming", close_delay_seconds=0.0,
    n_shards=clock.n_shards, runs=cfg.runs, registry_updates=None)``. With the bicriteria
    (``cfg.bicriteria``) apply it to ``(ticks, registry updates)``, the second the output of
    :class:`~transforms.bicriteria.CenterRegistry`."""

    def __init__(self, cfg: EngineConfig, clock: TickClock, seed_path: str, mode: str = "batch",
                 close_delay_seconds: float = 0.0, n_shards: Optional[int] = None, label: Optional[str] = None):
        super().__init__(label)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not (close_delay_seconds >= 0 and np.isfinite(close_delay_seconds)):
            raise ValueError(f"close_delay_seconds must be finite and >= 0, got {close_delay_seconds!r}")
        runs = cfg.runs
        total = None if runs is None else runs * cfg.horizon_ticks
        if total is not None and clock.horizon_ticks != total:
            raise ValueError(f"the clock's horizon ({clock.horizon_ticks}) must be runs × T = {total} ticks")
        self.cfg = cfg
        schedule = TickSchedule(clock, total, mode, float(close_delay_seconds))
        self.job = _Job(cfg, seed_path, clock.n_shards if n_shards is None else n_shards, schedule)

    @property
    def schedule(self) -> TickSchedule:
        return self.job.schedule

    def expand(self, pcolls):
        ticks, updates = pcolls if self.cfg.bicriteria else (pcolls, None)
        return apply_stages(self.job, ticks, updates)


def apply_stages(job: _Job, ticks, updates=None):
    """Wire the clustering stages onto ``ticks`` (and the CenterRegistry's ``updates``) where they
    are applied (the job applies them at its top level); returns the release dicts."""
    counts, points = ticks | "ShardTicks" >> ShardTicks(job)
    if updates is not None:
        counts = updates | "KeyUpdates" >> beam.FlatMap(_registry_by_run, job).with_output_types(IntKeyed)
    plans, release_plans = counts | "EpochPlan" >> EpochPlan(job, from_registry=updates is not None)
    routed = (points, plans) | "RouteByEpoch" >> RouteByEpoch(job)
    ring_out = [release_plans]
    centers = None
    for e in range(job.n_epochs):
        ins = {"ticks": routed[e]}
        if centers is not None:
            ins["centers"] = centers
        rel, centers = ins | f"Epoch{e}" >> EpochStages(job, e)
        ring_out.append(rel)
    records = tuple(ring_out) | "ReleaseCoreset" >> ReleaseCoreset(job)
    return records | "ClusterCoreset" >> ClusterCoreset(job)


def _registry_by_run(ups, job: _Job):
    """The CenterRegistry's ``[(global tick, new centers, count)]`` → per run ``(r, ("bic", [(t, …)]))``."""
    by = {}
    for g, new, count in ups:
        r, t = job.split(g)
        by.setdefault(r, []).append((t, new, count))
    for r in sorted(by):
        yield r, Msg(("bic", by[r]))
