"""Apache Beam transforms of dpstream (DESIGN.md §4).

Only the front of the pipeline lives here so far:

* :class:`~transforms.parse.ParsePoints` — raw records (JSON, CSV, numpy) to
  validated float64 points, with a ``dead_letter`` output for everything else;
* :class:`~transforms.ticks.BatchIntoTicks` — points to numpy batches keyed by
  ``(shard, tick)``, the tick taken from the record alone (its slot or its
  timestamp, never a count of arrived records);
* :class:`~transforms.ticks.DedupByMessageId` — drops Pub/Sub redeliveries
  before parsing and tick assignment.

The stateful stages (BicriteriaCenters, CenterRegistry, AssignRings,
RingMergeReduce, ReleaseCoreset) are not built yet.

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
)
