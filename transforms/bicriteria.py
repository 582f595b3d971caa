"""``BicriteriaCenters`` and ``CenterRegistry``: Alg. 2 as keyed Beam stages.

* ``BicriteriaCenters`` — one key per (tree, level, bucket shard), S = ``cfg.bucket_shards``
  (the job's ``--bucket_shards``) shards of each level's w buckets, each holding a
  :class:`dpstream.bicriteria.BicriteriaLevel` (its part of the R DPFindCenters and its own binary
  mechanism) in Beam state. A stateless step computes, for every batch, each key's
  counter update (a small integer vector; updates of a tick's batches add
  up) so the shuffle moves no points; each key steps once per tick 1..T, empty ticks included (⊥ updates), on the shared
  tick timer (:mod:`transforms.tick_timer`), and reports per tick the cells that
  passed pruning and its noisy bucket totals.
* ``CenterRegistry`` — one key holding a :class:`dpstream.bicriteria.CenterSet` (F and
  the DP count estimate). It absorbs tick k once all Q·(L+1)·S reports of tick k are in
  (data gating: no watermark involved) and broadcasts ``(tick, new centers, count
  estimate)`` for every tick, in order.

The engine computes the same thing vectorised (:class:`dpstream.bicriteria.BicriteriaDPCenters`);
for the same seed the outputs are identical (tests/test_bicriteria_split.py and the job's
equivalence test). Points are clipped to the public ball here exactly as the engine
clips them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional, Tuple

import numpy as np

import apache_beam as beam
from apache_beam.coders import PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.window import GlobalWindow, GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue

from dpstream.bicriteria import BicriteriaLevel, CenterSet, level_update, shard_of_update
from dpstream.rings import clip_to_ball
from dpstream.grids import ShiftedGrids
from dpstream.noise import NoiseSource
from dpstream.params import EngineConfig
from dpstream.privacy import PrivacyPlan
from transforms.keystats import KeyStats
from transforms.parse import NAMESPACE
from transforms.messages import LevelReports, LevelUpdate, StartClock
from transforms.stages import load_seed, measured
from transforms.tick_timer import TickSchedule, take_ticks_upto

REGISTRY_KEY = "dpstream-center-registry"
# Keys of the (tree, level, bucket shard) stages: ints, so Beam picks a deterministic key coder for the
# stateful DoFn (an ``Any`` key falls back to FastPrimitivesCoder, which Beam warns may not be deterministic).
LevelKeyed = Tuple[Tuple[int, int, int], Any]


def level_keys(cfg: EngineConfig):
    return [(q, lv, s) for q in range(cfg.n_trees) for lv in range(cfg.grid_levels)
            for s in range(cfg.bucket_shards)]


def _points(part) -> np.ndarray:
    return part.points if hasattr(part, "points") else np.asarray(part, dtype=np.float64)


def _narrow(u: np.ndarray) -> np.ndarray:
    return u.astype(np.int32) if u.max(initial=0) < 2**31 else u


class _LevelUpdatesFn(beam.DoFn):
    """A tick's (partial) batch → each (tree, level, bucket shard)'s counter update, computed here, in
    parallel and before the shuffle: the level keys then receive one small integer vector
    per batch instead of every point (the updates of a tick's parts add up).

    With the batch timer (``combine=True``: bounded input, one firing at the horizon) the updates of a
    bundle are summed per (key, tick) and emitted when the bundle finishes, so a key receives about one
    update per tick instead of one per point shard: the keys' per-element work was most of their CPU
    (measured: 8 elements per tick and key at ``--point_shards 8``). The sums are emitted early once they
    hold :attr:`MAX_HELD_BYTES` (a bundle of a big file can span many ticks); the keys add up what they
    get either way. A stream emits each update at once."""

    MAX_HELD_BYTES = 64 << 20

    def __init__(self, cfg: EngineConfig, seed_path: str, combine: bool = False):
        self.cfg, self.seed_path, self.combine = cfg, seed_path, bool(combine)
        self.levels = [(q, lv) for q in range(cfg.n_trees) for lv in range(cfg.grid_levels)]

    def setup(self):
        self._grids = ShiftedGrids(self.cfg, NoiseSource(load_seed(self.seed_path)))

    def start_bundle(self):
        self._acc = {}  # ((q, lv, s), tick) -> [summed update (int64), latest input timestamp]
        self._held = 0

    def updates(self, x: np.ndarray):
        """((q, lv, s), update) for every key, for a batch of points (clipped and centred here)."""
        cfg = self.cfg
        x, _ = clip_to_ball(np.array(x, dtype=np.float64), cfg.center_vec, cfg.radius)
        x = x - cfg.center_vec
        for q, lv in self.levels:
            whole = level_update(cfg, self._grids, x, q, lv)
            for s in range(cfg.bucket_shards):
                yield (q, lv, s), shard_of_update(cfg, lv, whole, s)

    def process(self, element, ts=beam.DoFn.TimestampParam):
        (_, tick), part = element
        x = _points(part)
        if not len(x):
            return
        tick = int(tick)
        if not self.combine:
            for key, u in self.updates(x):
                yield key, LevelUpdate(tick, _narrow(u))
            return
        for key, u in self.updates(x):
            acc = self._acc.get((key, tick))
            if acc is None:
                self._acc[(key, tick)] = [u.astype(np.int64), ts]
                self._held += u.size * 8
            else:
                acc[0] += u
                acc[1] = max(acc[1], ts)
        if self._held >= self.MAX_HELD_BYTES:
            yield from self.finish_bundle()

    def finish_bundle(self):
        acc, self._acc, self._held = self._acc, {}, 0
        for (key, tick), (u, ts) in acc.items():
            yield WindowedValue((key, LevelUpdate(tick, _narrow(u))), ts, [GlobalWindow()])


class LevelClock(NamedTuple):
    """A level key's state besides the level: the last tick it reported and the tick its timer is armed for."""
    done: int
    armed: Optional[int]


class _BicriteriaLevelFn(beam.DoFn):
    META = userstate.ReadModifyWriteStateSpec("dpstream_bic_meta", PickleCoder())
    LEVEL = userstate.ReadModifyWriteStateSpec("dpstream_bic_level", PickleCoder())
    BUFFER = userstate.BagStateSpec("dpstream_bic_buffer", PickleCoder())
    TICK = userstate.TimerSpec("dpstream_bic_tick", TimeDomain.WATERMARK)

    def __init__(self, cfg: EngineConfig, schedule: TickSchedule, seed_path: str):
        self.cfg, self.schedule, self.seed_path = cfg, schedule, seed_path

    def setup(self):
        self._seed = load_seed(self.seed_path)
        self._c_obsolete = Metrics.counter(NAMESPACE, "obsolete_timer_firings")
        self._c_closed = Metrics.counter(NAMESPACE, "bicriteria_after_close")
        self._stats = KeyStats("BicriteriaCenters")  # benchmark telemetry (make bench-beam), off by default

    def finish_bundle(self):
        self._stats.flush()

    @measured
    def process(self, element, meta=beam.DoFn.StateParam(META), buf=beam.DoFn.StateParam(BUFFER),
                timer=beam.DoFn.TimerParam(TICK)):
        key, item = element
        self._stats.note(key)
        m = meta.read()
        if m is None:
            m = LevelClock(0, self.schedule.first_armed())
            meta.write(m)
            timer.set(self.schedule.close_time(m.armed))
        if isinstance(item, StartClock):
            return
        if item.tick <= m.done:  # its tick is closed: frozen, never reopened
            self._c_closed.inc()
            return
        buf.add((item.tick, item.update))

    @userstate.on_timer(TICK)
    @measured
    def on_tick(self, ts=beam.DoFn.TimestampParam, key=beam.DoFn.KeyParam, meta=beam.DoFn.StateParam(META),
                level_state=beam.DoFn.StateParam(LEVEL), buf=beam.DoFn.StateParam(BUFFER),
                timer=beam.DoFn.TimerParam(TICK)):
        self._stats.note(key)
        m = meta.read()
        if m is None or m.armed is None:
            self._c_obsolete.inc()
            return
        if ts != self.schedule.close_time(m.armed):
            self._c_obsolete.inc()
            timer.set(self.schedule.close_time(m.armed))
            return
        upto = m.armed
        pending = take_ticks_upto(buf, upto)
        level = level_state.read()
        if level is None:
            noise = NoiseSource(self._seed)
            level = BicriteriaLevel(self.cfg, PrivacyPlan.build(self.cfg, test_seed=noise.test_seed),
                                    noise, key[0], key[1], key[2])
        # the level's noise source is reattached: BicriteriaLevel draws node noise every tick
        level.counter.noise.attach_seed(self._seed)
        reports = []
        for tick in range(m.done + 1, upto + 1):
            parts = pending.get(tick)
            u = np.sum([p.astype(np.int64) for p in parts], axis=0) if parts else None
            reports.append((tick, level.step_update(u)))
        level_state.write(level)
        self._stats.note(key, floats=level.state_floats())
        nxt = self.schedule.next_armed(upto)
        meta.write(LevelClock(upto, nxt))
        if nxt is not None:
            timer.set(self.schedule.close_time(nxt))
        yield REGISTRY_KEY, LevelReports(tuple(key), reports)


class BicriteriaCenters(beam.PTransform):
    """``((shard, tick), points)`` → ``(REGISTRY_KEY, LevelReports((q, level, bucket shard), [(tick, LevelReport), …]))``,
    every tick 1..T reported by every (tree, level, bucket shard) key (module docstring)."""

    def __init__(self, cfg: EngineConfig, schedule: TickSchedule, seed_path: str, label: Optional[str] = None):
        super().__init__(label)
        self.cfg, self.schedule, self.seed_path = cfg, schedule, seed_path

    def expand(self, pcoll):
        keys = level_keys(self.cfg)
        data = (pcoll | "LevelUpdates" >> beam.ParDo(_LevelUpdatesFn(self.cfg, self.seed_path,
                                                                    combine=self.schedule.mode == "batch"))
                .with_output_types(LevelKeyed)
                | "LevelWindow" >> beam.WindowInto(GlobalWindows()))
        start = (pcoll.pipeline | "StartLevels" >> beam.Create([(k, StartClock()) for k in keys])
                 .with_output_types(LevelKeyed))
        return ((data, start) | "WithStart" >> beam.Flatten()
                | "Levels" >> beam.ParDo(_BicriteriaLevelFn(self.cfg, self.schedule, self.seed_path))
                .with_input_types(LevelKeyed).with_output_types(Tuple[str, Any]))


@dataclass
class RegistryState:
    """CenterRegistry's state: the center set F, the last tick absorbed, and the level reports of later
    ticks (``{tick: {level key: report}}``)."""
    centers: CenterSet
    done: int = 0
    pending: dict = field(default_factory=dict)


class _CenterRegistryFn(beam.DoFn):
    STATE = userstate.ReadModifyWriteStateSpec("dpstream_registry_state", PickleCoder())

    def __init__(self, cfg: EngineConfig, seed_path: str):
        self.cfg, self.seed_path = cfg, seed_path
        self.n_levels = len(level_keys(cfg))

    def setup(self):
        self._seed = load_seed(self.seed_path)
        self._stats = KeyStats("CenterRegistry")

    def finish_bundle(self):
        self._stats.flush()

    @measured
    def process(self, element, state=beam.DoFn.StateParam(STATE)):
        key, item = element
        self._stats.note(key)
        st = state.read()
        if st is None:
            grids = ShiftedGrids(self.cfg, NoiseSource(self._seed))
            st = RegistryState(CenterSet(self.cfg, grids))
        for tick, rep in item.reports:
            if tick > st.done:
                st.pending.setdefault(tick, {})[item.level] = rep
        out = []
        while len(st.pending.get(st.done + 1, ())) == self.n_levels:
            tick = st.done + 1
            new, count = st.centers.absorb_shards(list(st.pending.pop(tick).values()))
            out.append((tick, new, count))
            st.done = tick
        state.write(st)
        self._stats.note(key, floats=st.centers.state_floats())
        if out:
            yield out


class CenterRegistry(beam.PTransform):
    """Level reports → lists of ``(tick, new centers, count estimate)``, every tick in order."""

    def __init__(self, cfg: EngineConfig, seed_path: str, label: Optional[str] = None):
        super().__init__(label)
        self._fn = _CenterRegistryFn(cfg, seed_path)

    def expand(self, pcoll):
        return pcoll | "Registry" >> beam.ParDo(self._fn).with_input_types(Tuple[str, Any])
