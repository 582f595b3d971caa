"""``ClusterTicks``: DPStreamCluster (Alg. 1) as a keyed stateful Beam stage.

The stage holds one :class:`dpstream.engine.Engine` in Beam state and steps it
once per tick of the public clock, empty ticks included, so the Beam job and
the library produce the *same* releases for the same seed and input (tested):
no DP logic is written twice.

How it meets DESIGN's tick contract (``reference/beam-and-pubsub-notes.md``):

* **Data-independent clock.** A start element (from ``Create``, not from the
  data) arms the first timer, so a stream without a single record still
  releases every tick in ``[1, T]``. Timers are set at ``tick_end(k) +
  close_delay − 1 ms`` (public); the number of releases and their timestamps
  depend only on public parameters.
* **Two modes, same releases** (:mod:`transforms.tick_timer`). ``mode="batch"`` arms one timer for the
  horizon's last tick and processes every buffered tick in that single firing
  (Beam's state cache sizes every write: one firing instead of T is the
  difference the notes measured). ``mode="streaming"`` loops one timer per
  tick (1, 2, …, T) and stops at T. A tick is processed only when a timer for
  a tick ≥ it has fired, i.e. when the watermark has passed its end plus the
  public ``close_delay``; its input is then frozen before any noise is drawn.
* **Guards.** Every firing checks that its timestamp is the one it armed; an
  obsolete firing (BundleBasedDirectRunner delivers them) re-arms and returns.
  Timer and state names are unique pipeline-wide (``dpstream_engine_*``).
* **Late data.** A record reaching this stage after its tick was processed is
  dropped and counted (``after_close``): admission is decided upstream by the
  public deadline (:class:`~transforms.ticks.BatchIntoTicks`), and this stage
  closes tick k at ``tick_end(k) + close_delay`` of the watermark; residual
  risk is documented in the README.
* **Order.** A tick arriving in several panes or shards is merged with
  :func:`~transforms.ticks.merge_partials`, so the tick's batch is a function of
  its set of records.
* **Seed.** The engine is pickled into state *without* its seed
  (:meth:`dpstream.noise.NoiseSource.__getstate__`); the DoFn reads the seed in
  ``setup`` from a file (any Beam filesystem path: local, ``gs://``) and
  re-attaches it after every state read. The seed never travels in the job graph.

Two shapes. ``bicriteria="internal"``: the whole engine under one key.
``bicriteria="external"`` (what the job uses): Alg. 2 runs in the parallel
:class:`~transforms.bicriteria.BicriteriaCenters` keys (one per (tree, level)) and the
:class:`~transforms.bicriteria.CenterRegistry`; this stage holds the rest of Alg. 1
(rings, DP-Merge-Reduce, epochs, release, clustering) and processes tick k once its
timer has closed k *and* the registry's update for k is in state (data gating: the
runner's watermark plays no part, so a late update only delays the release). The
ring/merge-reduce part stays under one key because ring centers come from the previous
release (a loop; docs/beam-job-plan.md).

Operator metrics (namespace ``dpstream``): ``ticks_released``,
``points_processed``, ``clipped`` (points the engine clipped onto the public ball,
counted per tick from the engine's ``n_clipped``), ``after_close``,
``obsolete_timer_firings``. Exact counts: telemetry only, never part of a release.
"""
from __future__ import annotations

import logging
from typing import Any, Optional, Tuple

import numpy as np

import apache_beam as beam
from apache_beam.coders import PickleCoder
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.window import GlobalWindows, TimestampedValue

from dpstream.engine import Engine
from dpstream.params import EngineConfig
from transforms.parse import NAMESPACE
from transforms.tick_timer import MODES, TickSchedule, take_ticks_upto
from transforms.ticks import TickClock, _Partial, merge_partials

_log = logging.getLogger("dpstream")
ENGINE_KEY = "dpstream-engine"
_START = ("start",)


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


class _ClusterTicksFn(beam.DoFn):
    META = userstate.ReadModifyWriteStateSpec("dpstream_engine_meta", PickleCoder())
    ENGINE = userstate.ReadModifyWriteStateSpec("dpstream_engine_state", PickleCoder())
    BUFFER = userstate.BagStateSpec("dpstream_engine_buffer", PickleCoder())
    BIC = userstate.BagStateSpec("dpstream_engine_bicriteria", PickleCoder())
    TICK = userstate.TimerSpec("dpstream_engine_tick", TimeDomain.WATERMARK)

    def __init__(self, cfg: EngineConfig, schedule: TickSchedule, seed_path: str, external: bool,
                 label_prefix: str = ""):
        self.cfg = cfg
        self.schedule = schedule
        self.seed_path = seed_path
        self.external = external
        self.label_prefix = label_prefix

    def setup(self):
        self._seed = load_seed(self.seed_path)
        c = lambda name: Metrics.counter(NAMESPACE, self.label_prefix + name)  # noqa: E731
        self._c_released, self._c_points = c("ticks_released"), c("points_processed")
        self._c_closed, self._c_obsolete = c("after_close"), c("obsolete_timer_firings")
        self._c_clipped = c("clipped")

    def process(self, element, meta=beam.DoFn.StateParam(META), engine_state=beam.DoFn.StateParam(ENGINE),
                buf=beam.DoFn.StateParam(BUFFER), bic=beam.DoFn.StateParam(BIC),
                timer=beam.DoFn.TimerParam(TICK)):
        _, item = element
        m = meta.read()
        if m is None:  # the first element (the start marker or data): arm the first tick
            m = {"done": 0, "fired": 0, "armed": self.schedule.first_armed()}
            meta.write(m)
            timer.set(self.schedule.close_time(m["armed"]))
        if item[0] == "tick":
            tick, part = item[1], item[2]
            if tick <= m["fired"]:  # its tick is closed: frozen, never reopened
                n = int(part.points.shape[0])
                self._c_closed.inc(n)
                _log.warning("dpstream: %d point(s) of tick %d arrived after the tick closed; dropped "
                             "(raise --allowed_lateness_seconds if this recurs)", n, tick)
                return
            buf.add((tick, part))
        elif item[0] == "bic":  # the CenterRegistry's updates: data gating, no watermark
            for upd in item[1]:
                bic.add(upd)
            yield from self._advance(m, meta, engine_state, buf, bic)

    @userstate.on_timer(TICK)
    def on_tick(self, ts=beam.DoFn.TimestampParam, meta=beam.DoFn.StateParam(META),
                engine_state=beam.DoFn.StateParam(ENGINE), buf=beam.DoFn.StateParam(BUFFER),
                bic=beam.DoFn.StateParam(BIC), timer=beam.DoFn.TimerParam(TICK)):
        m = meta.read()
        if m is None or m["armed"] is None:
            self._c_obsolete.inc()
            return
        want = self.schedule.close_time(m["armed"])
        if ts != want:  # an obsolete firing of a timer that was re-set: restore it, do nothing
            self._c_obsolete.inc()
            timer.set(want)
            return
        m = dict(m, fired=m["armed"], armed=self.schedule.next_armed(m["armed"]))
        meta.write(m)
        if m["armed"] is not None:
            timer.set(self.schedule.close_time(m["armed"]))
        yield from self._advance(m, meta, engine_state, buf, bic)

    def _advance(self, m, meta, engine_state, buf, bic):
        """Process every tick that is closed (its timer fired) and, with an external
        bicriteria, whose registry update is in: in order, each exactly once."""
        updates = {u[0]: u for u in bic.read()} if self.external else {}
        upto = m["done"]
        while upto < m["fired"] and (not self.external or (upto + 1) in updates):
            upto += 1
        if upto <= m["done"]:
            return
        pending = take_ticks_upto(buf, upto)
        if self.external:
            bic.clear()
            for t, u in updates.items():
                if t > upto:
                    bic.add(u)

        engine = engine_state.read()
        if engine is None:
            engine = Engine(self.cfg, self._seed, bicriteria="external" if self.external else "internal")
        else:
            engine.attach_seed(self._seed)
        dim = self.cfg.dim
        clipped = engine.n_clipped
        for tick in range(m["done"] + 1, upto + 1):
            parts = pending.get(tick)
            x = merge_partials(parts).points if parts else np.zeros((0, dim))
            upd = (updates[tick][1], updates[tick][2]) if self.external else None
            release = engine.step(x, upd)
            self._c_points.inc(int(x.shape[0]))
            if engine.n_clipped != clipped:  # this tick's clipped points (operator telemetry)
                self._c_clipped.inc(int(engine.n_clipped - clipped))
                clipped = engine.n_clipped
            self._c_released.inc()
            yield TimestampedValue(release.to_dict(), self.schedule.close_time(tick))
        engine_state.write(engine)
        meta.write(dict(m, done=upto))


class ClusterTicks(beam.PTransform):
    """``((shard, tick), points | _Partial)`` → one release dict per tick 1..T.

    ``ClusterTicks(cfg, clock, seed_path, mode="batch"|"streaming",
    close_delay_seconds=0.0, bicriteria="internal"|"external")``; see the module
    docstring. With ``bicriteria="external"`` apply it to a pair ``(points,
    registry_updates)``, the second the output of
    :class:`~transforms.bicriteria.CenterRegistry`. Each release dict is
    :meth:`dpstream.release.Release.to_dict` (fields :data:`dpstream.release.RELEASE_FIELDS`),
    timestamped at its tick's public close time.
    """

    def __init__(self, cfg: EngineConfig, clock: TickClock, seed_path: str, mode: str = "batch",
                 close_delay_seconds: float = 0.0, bicriteria: str = "internal", label_prefix: str = "",
                 label: Optional[str] = None):
        super().__init__(label)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if bicriteria not in ("internal", "external"):
            raise ValueError(f"bicriteria must be 'internal' or 'external', got {bicriteria!r}")
        if clock.horizon_ticks != cfg.horizon_ticks:
            raise ValueError(f"the clock's horizon ({clock.horizon_ticks}) and the engine's "
                             f"({cfg.horizon_ticks}) must be the same public T")
        if not (close_delay_seconds >= 0 and np.isfinite(close_delay_seconds)):
            raise ValueError(f"close_delay_seconds must be finite and >= 0, got {close_delay_seconds!r}")
        self.schedule = TickSchedule(clock, cfg.horizon_ticks, mode, float(close_delay_seconds))
        self.external = bicriteria == "external" and cfg.bicriteria
        self._fn = _ClusterTicksFn(cfg, self.schedule, seed_path, self.external, label_prefix)
        self.dim = cfg.dim

    def expand(self, pcolls):
        if self.external:
            points, updates = pcolls
        else:
            points, updates = pcolls, None
        dim = self.dim
        # one plain global window for every input (upstream may have a processing-time trigger)
        data = (points | "KeyByEngine" >> beam.Map(
            lambda kv: (ENGINE_KEY, ("tick", int(kv[0][1]), _as_partial(kv[1], dim))))
            .with_output_types(Tuple[str, Any])
            | "DataWindow" >> beam.WindowInto(GlobalWindows()))
        start = (points.pipeline | "StartClock" >> beam.Create([(ENGINE_KEY, _START)])
                 .with_output_types(Tuple[str, Any]))
        inputs = [data, start]
        if updates is not None:
            inputs.append(updates | "KeyUpdates" >> beam.Map(lambda ups: (ENGINE_KEY, ("bic", ups)))
                          .with_output_types(Tuple[str, Any])
                          | "UpdateWindow" >> beam.WindowInto(GlobalWindows()))
        return (tuple(inputs) | "WithStart" >> beam.Flatten()
                | "RunEngine" >> beam.ParDo(self._fn).with_input_types(Tuple[str, Any]))
