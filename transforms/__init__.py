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

All are importable without running a pipeline; the modules import
``apache_beam`` at import time, so import them only where Beam is installed.
"""
from transforms.parse import (  # noqa: F401
    DEAD_LETTER,
    MAX_RAW_CHARS,
    REASONS,
    ParsedPoint,
    ParsePoints,
    ParsePointsFn,
    Record,
    count_items,
    parse_record,
    records_from_arrays,
    records_from_lines,
)
from transforms.ticks import (  # noqa: F401
    BatchIntoTicks,
    TickClock,
    merge_partials,
)
from transforms.dedup import DedupByMessageId, redelivery_window  # noqa: F401
from transforms.cluster import ClusterTicks, load_seed  # noqa: F401,E402
