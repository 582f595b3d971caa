"""Workaround: the in-process SDK worker waits up to 200 ms at the end of every bundle (Beam 2.77).

Each bundle starts a state-sampler thread (``apache_beam.runners.worker.statesampler``) that sleeps in
steps growing from 2 ms to its period, 200 ms, and the bundle's end joins that thread: the worker idles
until the current sleep ends, ~100 ms on average for a bundle longer than a second. On 10⁶ × 10 points
(1,000 ticks, 25 bundles) the joins took 0.57 s of a 9 s run, the process idle; with a 10 ms period 0.08 s
(2 ms: 0.04 s, the threads' own start and exit).

:func:`install` gives the samplers Beam builds a 10 ms period (the default of ``StateSampler``'s
``sampling_period_ms``; Beam offers no option for it: ``BundleProcessor`` passes none). The sampler only
times which step the worker is in, for Beam's own execution-time metrics (per-step msecs the job never
reads); no element, state, timer or counter of the job depends on it. A sleeping sampler thread holds
neither the GIL nor the worker, so waking every 10 ms costs nothing measurable. Idempotent; applied by
:func:`pipelines.local_runner.install`.
"""
from __future__ import annotations

SAMPLING_PERIOD_MS = 10


def install() -> None:
    from apache_beam.runners.worker import statesampler

    if getattr(statesampler, "_dpstream_sampling_period_ms", None) is not None:
        return
    init = statesampler.StateSampler.__init__
    if init.__defaults__ != (statesampler.DEFAULT_SAMPLING_PERIOD_MS,):
        return  # not the signature measured: leave Beam's default
    init.__defaults__ = (SAMPLING_PERIOD_MS,)
    statesampler._dpstream_sampling_period_ms = SAMPLING_PERIOD_MS
