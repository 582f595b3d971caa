"""The per-epoch copies of the clustering stages (Alg. 1's loop over epochs, unrolled over the public
epoch indices e < ⌊log2 T⌋ + 2): :class:`AssignRings` (key (run, point shard)), RingMergeReduce (key
(run, epoch, ring): the ring's sparse vector, block and DP-Merge-Reduce levels, Alg. 4/5) and
:class:`EpochClose` (key run: the epoch's coreset and the next epoch's ring centers), wired by
:class:`EpochStages`. See ``transforms/cluster.py`` and ``docs/beam-graph.md``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

import apache_beam as beam
from apache_beam.coders import BytesCoder, PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms import userstate

from dpstream import release_step, rules
from dpstream.merge_reduce import RingMergeReduce as _Ring, flush_restart, part_svt, fire_and_restart
from dpstream.rings import assign_parts, clip_to_ball
from dpstream.semicoresets import WeightedSet
from dpstream.sparse_vector import LevelZeroAboveThreshold

from transforms.parse import NAMESPACE
from transforms.messages import PackedParts, RingCenters, RingClosed, RingParts, RingRecords, RingTick, RoutedTicks
from transforms.stages import (IntKeyed, PairKeyed, RELEASE_KEY, wire, row_blocks, ClusterJob,
    RunContext, StageFn, load_state, measured, open_msg, store_state)


@dataclass
class AssignState:
    """AssignRings' state of a (run, shard) for one epoch: the epoch's ring centers (None until
    EpochClose of the epoch before sends them), how many ticks it assigned, the epoch's span in ticks
    once known, and (shard 0) the closed epochs' coresets to pass on to ring 0. The routed ticks that
    wait for the centers are not here but in the stage's bag, as the bytes they came as."""
    centers: Optional[np.ndarray]
    n: int = 0
    span: Optional[int] = None
    prev: Optional[list] = None


@dataclass
class RingState:
    """RingMergeReduce's state of a (run, ring) for one epoch: the ring's merge-reduce state and sparse
    vector (None before its first complete tick), the shards' parts counted per tick, the next tick
    to process, the centers the points were assigned to and (ring 0) the closed epochs' coresets."""
    ring: Optional[dict] = None
    svt: Optional[LevelZeroAboveThreshold] = None
    psvt: Optional[LevelZeroAboveThreshold] = None  # ``part_fire`` (P23): the ring's instances of the part one
    have: dict = field(default_factory=dict)
    next_tick: Optional[int] = None
    centers: Optional[np.ndarray] = None
    prev: Optional[list] = None


@dataclass
class CloseState:
    """EpochClose's state of a run for one epoch: each ring's released set at the adoption tick, that
    tick, F (the candidates) and the coresets of the epochs before (None until ring 0 brings them)."""
    sets: dict = field(default_factory=dict)
    tick: Optional[int] = None
    candidates: Optional[np.ndarray] = None
    prev: Optional[list] = None


class _EpochStageFn(StageFn):
    """A stage that exists once per epoch index (the unrolled ring-centers loop): it knows its epoch."""

    def __init__(self, job: ClusterJob, epoch: int, label: str = None):
        super().__init__(job, label)
        self.epoch = int(epoch)


# --------------------------------------------------------------------------- AssignRings

class _AssignRingsFn(_EpochStageFn):
    STAGE = "AssignRings"
    STATE = userstate.ReadModifyWriteStateSpec("dpstream_assign_state", BytesCoder())
    # routed ticks that came before the epoch's ring centers, each message as its wire bytes: an append
    # writes one message, where a state value holding them all was re-pickled whole on every arrival
    # (quadratic in the epoch's ticks when a runner delivers them all before the centers: the local runner
    # with the looping timer, 6.2 of its 11 CPU s in the stages at 1e6 × 10)
    WAITING = userstate.BagStateSpec("dpstream_assign_waiting", BytesCoder())

    def setup(self):
        super().setup()
        self._dirs = {}
        self._c_clipped = Metrics.counter(NAMESPACE, "clipped")

    def _directions(self, r: int, ctx: RunContext):
        V = self._dirs.get(r)
        if V is None:
            self._dirs.clear()
            V = self._dirs[r] = [ctx.A.directions(("A", self.epoch, i)) for i in range(self.job.n_rings)]
        return V

    @measured
    def process(self, element, state=beam.DoFn.StateParam(STATE), waiting=beam.DoFn.StateParam(WAITING)):
        key, raw = element
        item = open_msg(raw)
        r, s = key
        job, cfg, e = self.job, self.job.cfg, self.epoch
        st = load_state(state) or AssignState(cfg.center_vec[None, :].copy() if e == 0 else None)
        if isinstance(item, RoutedTicks):
            if st.centers is None:  # wait for the centers (the state itself is unchanged)
                waiting.add(raw)
                self._stats.note(key, points=sum(tp.n for tp in item.ticks))
                return
            routed = [item]
        else:  # RingCenters: this epoch's ring centers, from EpochClose of epoch e − 1
            st.centers = np.asarray(item.centers, dtype=float)
            st.prev = item.coresets  # shard 0 only: the closed epochs' coresets, passed on to ring 0
            routed = [open_msg(b) for b in waiting.read()]
            waiting.clear()
        pending, X = _in_tick_order(routed)
        if not pending:
            store_state(state, st)
            self._stats.note(key)
            return
        C = st.centers
        ctx = self.run(r)
        V = self._directions(r, ctx)
        I = job.n_rings
        # the points as read (compact_points), clipped here, where the rings need them: clipping is row by row
        # and widens float32 exactly before any arithmetic, so it gives the engine's bits, and float32 input
        # crosses the shuffles into RouteByEpoch and AssignRings as float32
        blocks = [ctx.A.open_block(C, np.full(C.shape[0], float(cfg.ring_radius(i))), ("A", e, i), directions=V[i])
                  for i in range(I)]
        parts = [[] for _ in range(I)]
        sizes = [tp.n for tp in pending]
        starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        nclip = 0
        # a group of whole ticks at a time: the widened, clipped copy of the points and each ring's selection of
        # it are a group's, not the whole message's (the tick's partials do not depend on the other ticks)
        for lo, hi in tick_groups(sizes, max(1, ASSIGN_GROUP_BYTES // (8 * cfg.dim))):
            Xg, nc = clip_to_ball(X[starts[lo]:starts[hi]], cfg.center_vec, cfg.radius)
            nclip += nc
            tix = np.repeat(np.arange(hi - lo), sizes[lo:hi])
            if len(Xg):
                ring, f = assign_parts(Xg, C, cfg.ring_base, cfg.n_rings, cfg.ring_ratio, cfg.ring_tolerance)
                order = np.argsort(ring, kind="stable")
                bounds = np.searchsorted(ring[order], np.arange(I + 1))
            else:
                order, bounds = np.zeros(0, dtype=np.int64), np.zeros(I + 1, dtype=np.int64)
            for i in range(I):  # every ring, empty ones included (heartbeats): a loop over rings, not points
                sel = order[bounds[i]:bounds[i + 1]]
                fi = f[sel] if len(Xg) else sel
                got = blocks[i].partials(Xg[sel], fi, tix[sel], hi - lo)
                if cfg.part_fire:  # P23: each tick's points per part ride with its partial, summed by the ring
                    P = C.shape[0]
                    cells = np.bincount(tix[sel] * P + fi, minlength=(hi - lo) * P).reshape(hi - lo, P)
                    got = [g[:-1] + (cells[j], g[-1]) for j, g in enumerate(got)]
                parts[i].extend(got)
        if nclip:
            self._c_clipped.inc(nclip)
        out = [pack_parts([tp.tick for tp in pending], parts[i], [tp.plan for tp in pending]) for i in range(I)]
        for tp in pending:
            if tp.plan.adopt or tp.plan.final:
                st.span = tp.tick - tp.plan.first + 1
        st.n += len(pending)
        # the closed epochs' coresets (shard 0 only) go once, with this shard's first parts: ring 0
        # cannot complete a tick without them, so it holds them before its epoch can close
        prev, st.prev = st.prev, None
        if st.span is not None and st.n >= st.span:
            state.clear()  # the epoch's last tick is out: this key is done
        else:
            store_state(state, st)
        for i in range(I):
            yield (r, i), wire(RingParts(s, C, out[i], prev if i == 0 else None))
        self._stats.note(key)


# the points AssignRings widens and clips at once: ~16 MB of float64 (5,461 rows at d = 384, all of a
# message's ticks at d = 10 up to 209,715 rows)
ASSIGN_GROUP_BYTES = 16 << 20


def tick_groups(sizes, rows: int):
    """``[(first, end)]``: consecutive ticks (indices into ``sizes``, their points) in groups of at most
    ``rows`` points (a larger tick alone), every tick in one group, at least one group."""
    out, lo, n = [], 0, 0
    for j, m in enumerate(sizes):
        if j > lo and n + m > rows:
            out.append((lo, j))
            lo, n = j, 0
        n += m
    return out + [(lo, len(sizes))]


def _in_tick_order(routed: List[RoutedTicks]):
    """The ticks of several :class:`RoutedTicks` (each tick in one of them: a tick's points are routed
    once) in tick order, whatever order a bag gives the messages back in, and their points tick after
    tick; one message in order is used as it is (no copy of its points)."""
    if len(routed) == 1 and all(a.tick < b.tick for a, b in zip(routed[0].ticks, routed[0].ticks[1:])):
        return list(routed[0].ticks), routed[0].points
    entries = sorted(((tp.tick, tp, x) for m in routed
                      for tp, x in zip(m.ticks, row_blocks(m.points, [tp.n for tp in m.ticks]))),
                     key=lambda en: en[0])
    if not entries:
        return [], None
    return [tp for _, tp, _ in entries], np.concatenate([x for _, _, x in entries])


def pack_parts(ticks, parts, plans) -> PackedParts:
    """A ring's partial sketches of consecutive ticks, each ``(*arrays with a row per entry, n)`` (the
    block's ``partial``: integer tables, or raw points for lloyd / snap), as one array per position:
    one pickle each instead of one per tick and position (a shard ships ~1,000 ticks × 12 rings at
    once in batch). A position whose arrays differ in dtype, row shape or rows stays a list."""
    sizes = [len(p[0]) for p in parts]
    cols = []
    for j in range(len(parts[0]) - 1):
        arrs = [p[j] for p in parts]
        kinds = {(a.dtype, a.shape[1:]) for a in arrs if isinstance(a, np.ndarray)}
        same = len(kinds) == 1 and all(isinstance(a, np.ndarray) for a in arrs) and [len(a) for a in arrs] == sizes
        cols.append(np.concatenate(arrs) if same else arrs)
    return PackedParts(list(ticks), [int(p[-1]) for p in parts], list(plans), sizes, cols)


def unpack_parts(packed: PackedParts):
    """:func:`pack_parts` → ``[(t, partial, plan)]`` (the arrays as views)."""
    cols = [row_blocks(c, packed.sizes) if isinstance(c, np.ndarray) else c for c in packed.cols]
    return [(t, arrays + (n,), p) for t, n, p, arrays in zip(packed.ticks, packed.ns, packed.plans, zip(*cols))]


# --------------------------------------------------------------------------- RingMergeReduce

class _RingFn(_EpochStageFn):
    STAGE = "RingMergeReduce"
    STATE = userstate.ReadModifyWriteStateSpec("dpstream_ring_state", BytesCoder())
    INBOX = userstate.BagStateSpec("dpstream_ring_inbox", PickleCoder())

    @measured
    def process(self, element, state=beam.DoFn.StateParam(STATE), inbox=beam.DoFn.StateParam(INBOX)):
        key, item = element
        item = open_msg(item)
        r, i = key
        job, cfg, e = self.job, self.job.cfg, self.epoch
        st = load_state(state) or RingState()
        s, C, prev = item.shard, item.centers, item.prev
        entries = unpack_parts(item.packed)
        st.centers = C
        if prev is not None:  # ring 0 of epoch e > 0: the closed epochs' coresets, for EpochClose[e]
            st.prev = prev
        for t, part, p in entries:
            st.have[t] = st.have.get(t, 0) + 1
            if st.next_tick is None:
                st.next_tick = p.first
        if st.have.get(st.next_tick, 0) < job.n_shards:  # tick `next_tick` is not complete: wait (data gating)
            inbox.add((s, entries))
            store_state(state, st)
            self._stats.note(key)
            return
        # the inbox (a bag: appends cost one small write) holds what arrived before; read it once
        pending, plans = {}, {}
        for sh, ents in list(inbox.read()) + [(s, entries)]:
            for t, part, p in ents:
                pending.setdefault(t, {})[sh] = part
                plans[t] = p
        inbox.clear()
        ctx = self.run(r)
        ring = svt = psvt = None
        recs, closing, done = [], None, False
        while not done and len(pending.get(st.next_tick, ())) == job.n_shards:
            t = st.next_tick
            parts, p = pending.pop(t), plans.pop(t)
            if ring is None:
                ring = (_Ring(cfg, ctx.noise, ctx.A, e, i, st.centers, p.count0) if st.ring is None
                        else _Ring.from_state(st.ring, cfg, ctx.noise, ctx.A))
                svt = st.svt or LevelZeroAboveThreshold(cfg.n_rings, ctx.block_size, ctx.plan.svt_scale,
                                                           ctx.noise, ("svt", e), index=i)
                svt.noise = ctx.noise
                if cfg.part_fire:
                    psvt = st.psvt or part_svt(cfg, ctx.plan, ctx.noise, e, st.centers.shape[0], ctx.block_size, i)
                    psvt.noise = ctx.noise
                unmerged = []  # this firing's partial sketches not yet in the block (sums of integers)
            n = sum(int(parts[sh][-1]) for sh in parts)
            before = list(ring.levels)
            if psvt is None:
                unmerged.extend(parts[sh] for sh in sorted(parts))
                release = bool(svt.step(t, np.array([n], dtype=np.int64))[0])
            else:  # P23: the shards' part counts summed, then the ring's and its parts' tests, as the engine's
                unmerged.extend(parts[sh][:-2] + (parts[sh][-1],) for sh in sorted(parts))
                cells = np.sum([parts[sh][-2] for sh in sorted(parts)], axis=0, dtype=np.int64)
                release = bool(fire_and_restart(svt, psvt, t, np.array([n], dtype=np.int64), cells, None,
                                                rules.part_fire_open(t, cfg.horizon_ticks))[0][0])
                flush_restart(psvt, t, np.array([p.flush and not release and ring.last_release != t]))
            if release or (p.flush and ring.last_release != t):  # a fire, or the flush (epoch change, t = 1, T)
                ring.block.merge_many(unmerged)
                unmerged = []
                ring.release_block(t, p.count)
            changed = ring.last_release == t
            delta = [(j, lv) for j, lv in enumerate(ring.levels)
                     if j >= len(before) or lv is not before[j]] if changed else None
            recs.append(RingTick(t, changed, delta, len(ring.levels)))
            if p.adopt:
                closing = (t, ring.released(), p.candidates)
            st.next_tick = t + 1
            done = p.adopt or p.final
        floats = 0
        if ring is not None and unmerged:
            ring.block.merge_many(unmerged)  # the state written holds one compact table
        for t in [t for t in st.have if t < st.next_tick]:
            del st.have[t]
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
                st.ring, st.svt = ring.state(), svt
                if psvt is not None:
                    psvt.noise = None
                    st.psvt = psvt
                floats = ring.state_floats()
            store_state(state, st)
        if recs:
            yield RELEASE_KEY, wire(RingRecords(r, e, i, recs))
        if closing is not None:
            yield beam.pvalue.TaggedOutput("close", (r, wire(RingClosed(i, *closing, st.prev if i == 0 else None))))
        self._stats.note(key, floats=floats,
                         points=ring.block.n if ring is not None and not done else 0)


# --------------------------------------------------------------------------- EpochClose

class _EpochCloseFn(_EpochStageFn):
    STAGE = "EpochClose"
    STATE = userstate.ReadModifyWriteStateSpec("dpstream_close_state", BytesCoder())

    @measured
    def process(self, element, state=beam.DoFn.StateParam(STATE)):
        r, item = element
        item = open_msg(item)
        job, cfg, e = self.job, self.job.cfg, self.epoch
        st = load_state(state) or CloseState(prev=[] if e == 0 else None)
        st.sets[item.ring], st.tick, st.candidates = item.released, item.tick, item.candidates
        if item.prev is not None:  # ring 0: the coresets of the epochs before e
            st.prev = item.prev
        if len(st.sets) < job.n_rings or st.prev is None:
            store_state(state, st)
            self._stats.note(r)
            return
        state.clear()
        ctx, t = self.run(r), st.tick
        S = WeightedSet.concat([st.sets[i] for i in range(job.n_rings)], cfg.dim)
        coresets = list(st.prev) + [release_step.epoch_coreset(cfg, ctx.noise, S, e, t)]
        rel = release_step.ring_release(cfg, ctx.noise, coresets, None, e + 1, t)
        ring = release_step.released_ring_centers(cfg, ctx.noise, rel, e + 1, t)
        F = release_step.next_ring_centers(st.candidates, ring)
        # the next epoch's ring centers to every shard; the coresets so far ride with shard 0's copy
        # (AssignRings[e+1] shard 0 → RingMergeReduce[e+1] ring 0 → EpochClose[e+1]): a direct edge
        # EpochClose[e] → EpochClose[e+1] would double, copy after copy, the (empty) bundles the
        # BundleBasedDirectRunner runs for every upstream bundle (measured: 544 per key-stage of
        # copy 4 at T = 8, 12,770 bundles in all)
        msg = wire(RingCenters(F, None))
        for s in range(job.n_shards):
            yield (r, s), (wire(RingCenters(F, coresets)) if s == 0 else msg)
        self._stats.note(r)


class EpochStages(beam.PTransform):
    """The copy of the per-epoch stages for epoch index e: ``AssignRings`` → ``RingMergeReduce`` →
    ``EpochClose``. Input: (routed ticks of epoch e, ring centers — with the closed epochs'
    coresets for shard 0 — from copy e − 1 or None); output: (ring records for ReleaseCoreset,
    centers and coresets for copy e + 1, or None for the last copy)."""

    def __init__(self, job: ClusterJob, epoch: int, label: Optional[str] = None):
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
