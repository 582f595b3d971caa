"""Apache Beam transforms of dpstream (DESIGN.md §4).

Only the front of the pipeline lives here so far:

* :class:`~transforms.parse.ParsePoints` — raw records (JSON, CSV, numpy) to
  validated float64 points, with a ``dead_letter`` output for everything else;
* :class:`~transforms.ticks.BatchIntoTicks` — points to numpy batches keyed by
  ``(shard, tick)``, the tick taken from the record alone (its slot or its
  timestamp, never a count of arrived records);
* :class:`~transforms.ticks.DedupByMessageId` — drops Pub/Sub redeliveries
  before parsing and tick assignment, remembering each message for the public
  window :func:`~transforms.ticks.redelivery_window` derives from the tick length,
  the close delay and the clock skew.

* :class:`~transforms.cluster.ClusterTicks` — the engine (Alg. 1) held in Beam
  state under one key, stepped once per public tick (batch: one timer firing;
  streaming: a looping, guarded tick timer), one release per tick 1..T.

The sharded decomposition of DESIGN §4 (BicriteriaCenters, CenterRegistry,
AssignRings, RingMergeReduce as separate keyed stages) is not built yet;
ClusterTicks runs those steps in one keyed stage (docs/beam-job-plan.md).

All three are importable without running a pipeline; the modules import
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
    DedupByMessageId,
    TickClock,
    merge_partials,
    redelivery_window,
)
from transforms.cluster import ClusterTicks, load_seed  # noqa: F401,E402
