"""Apache Beam transforms of dpstream (the tick contract: docs/beam-graph.md).

* :class:`~transforms.parse.ParsePoints` — raw records (JSON, CSV, numpy) to
  validated float64 points, with a ``dead_letter`` output for everything else;
* :class:`~transforms.ticks.BatchIntoTicks` — points to numpy batches keyed by
  ``(shard, tick)``, the tick taken from the record alone (its slot or its
  timestamp, never a count of arrived records);
* :class:`~transforms.dedup.DedupByMessageId` — drops Pub/Sub redeliveries
  before parsing and tick assignment, remembering each message for the public
  window :func:`~transforms.dedup.redelivery_window` derives from the tick length,
  the close delay and the clock skew.

* :class:`~transforms.cluster.ClusterTicks` — Alg. 1 as keyed stages over the core's components
  (ShardTicks → EpochPlan → RouteByEpoch → per epoch AssignRings / RingMergeReduce / EpochClose →
  ReleaseCoreset → ClusterCoreset; ``transforms/cluster.py``, ``epoch_stages.py``,
  ``release_stages.py``; ``docs/beam-graph.md``), one release per tick of every run; the bicriteria
  (Alg. 2) as BicriteriaCenters and CenterRegistry (``transforms/bicriteria.py``).

Parsing without Beam: :mod:`transforms.records` (the record, point and dead-letter types) and
:mod:`transforms.parser` (:func:`~transforms.parser.parse_record`) import no ``apache_beam``, so the
report step and any tool read a file as the job does where Beam is not installed. Every other module
imports ``apache_beam``; this package imports none of them until a name below is first asked for.
"""
from __future__ import annotations

import importlib

_LAZY = {  # the package's names, each loaded from its module on first use
    **dict.fromkeys(("DEAD_LETTER", "ParsePoints", "ParsePointsFn"), "transforms.parse"),
    **dict.fromkeys(("MAX_RAW_CHARS", "REASONS", "ParsedPoint", "Record", "count_items", "records_from_arrays",
                     "records_from_lines"), "transforms.records"),
    "parse_record": "transforms.parser",
    **dict.fromkeys(("BatchIntoTicks", "TickClock", "merge_partials"), "transforms.ticks"),
    **dict.fromkeys(("DedupByMessageId", "redelivery_window"), "transforms.dedup"),
    **dict.fromkeys(("ClusterTicks", "load_seed"), "transforms.cluster"),
}
__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'transforms' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
