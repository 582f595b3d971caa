"""Workaround: the BundleBasedDirectRunner loses the user counters of streaming pipelines (Beam 2.77).

Measured: a streaming job on the BundleBasedDirectRunner (Pub/Sub or TestStream input)
reported no ``dpstream`` counter at all, and a counter after a ``Flatten`` counted 1 of
6 elements. The cause: each worker thread of the runner keeps one ``StateSampler`` whose
``scoped_state`` caches a state per (step, start/process/finish); the cached state holds
the ``MetricsContainer`` of the *first* bundle that step ran on that thread. Every later
bundle gets a new container from the runner (``executor.TransformExecutor.call``), which
the runner commits, while the DoFn's counters write into the cached, already committed
one: their updates are lost.

:func:`install` gives each (worker thread, step) one container, reused for every bundle
(so it is the one the cached state holds), whose ``get_cumulative()`` returns what the
current bundle added: the runner then commits each bundle's own counter updates. Only
counters are made per-bundle (dpstream uses no other metric type). The FnApiRunner
(batch) does not use this code path and is unaffected. Idempotent; applied by
:func:`pipelines.local_runner.install`.
"""
from __future__ import annotations

import threading

from apache_beam.metrics.execution import MetricsContainer

_local = threading.local()


class _BundleCounters(MetricsContainer):
    """A step's container on one worker thread, reused across bundles; reports per-bundle counters."""

    def start_bundle(self) -> None:
        self._base = dict(MetricsContainer.get_cumulative(self).counters)

    def get_cumulative(self):
        updates = MetricsContainer.get_cumulative(self)
        base = getattr(self, "_base", {})
        updates.counters = {k: v - base.get(k, 0) for k, v in updates.counters.items() if v != base.get(k, 0)}
        return updates


def _container_for_bundle(step_name):
    cache = getattr(_local, "containers", None)
    if cache is None:
        cache = _local.containers = {}
    c = cache.get(step_name)
    if c is None:
        c = cache[step_name] = _BundleCounters(step_name)
    c.start_bundle()
    return c


def install() -> None:
    from apache_beam.runners.direct import executor

    if getattr(executor, "_dpstream_bundle_counters", False):
        return
    executor.MetricsContainer = _container_for_bundle
    executor._dpstream_bundle_counters = True
