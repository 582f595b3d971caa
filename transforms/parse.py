"""``ParsePoints``: raw records to validated float64 points, plus a dead-letter output.

The records, points and dead letters are :mod:`transforms.records`; the formats and the checks are
:mod:`transforms.parser` (both Beam-free). This module runs that parser as a Beam DoFn.

Outputs
-------
``ParsePoints(...)`` returns a ``DoOutputsTuple``: ``result.points`` holds
:class:`ParsedPoint` ``(point: float64 ndarray (dim,), slot, ts, message_id,
publish_time)`` — ``ts`` the event time (the JSON ``"ts"``, else the carrier's),
``publish_time`` the carrier's time ``Record.ts`` whatever the payload says (for
Pub/Sub the server-assigned publish time, by which
:class:`~transforms.ticks.BatchIntoTicks` admits late records) — and ``result.dead_letter`` (also ``result["dead_letter"]``) holds JSON-ready
dicts ``{raw, reason, detail, slot, ts, message_id}``: ``raw`` is a ``str`` of
at most :data:`MAX_RAW_CHARS` UTF-8 bytes (text as is; undecodable binary and
arrays as ``repr``); ``reason`` is one of :data:`REASONS`; ``slot`` and ``ts``
are the item's own (a dead-lettered record keeps its slot, nothing is
renumbered, so no other record's position — and tick — changes).

Every item is either a point or a dead letter, never both and never neither, and
parsing never raises: the counters ``read = valid + dead_letter`` hold exactly
(``Metrics.counter("dpstream", prefix + name)`` for ``read``, ``valid``,
``dead_letter`` and ``dead_letter_<reason>``). These are operator metrics: exact
counts, never part of a release (P18).
"""
from __future__ import annotations

import math
import numbers
from typing import Optional

import apache_beam as beam
from apache_beam.metrics import Metrics

# the names the job, its tests and its tools import from here
from transforms.parser import parse_record  # noqa: F401
from transforms.records import (MAX_RAW_CHARS, MAX_SLOT, REASONS, ParsedBatch, ParsedPoint, Record,  # noqa: F401
                                as_record, count_items, dead_letter_of, records_from_arrays,
                                records_from_lines, show_raw)
from transforms.text_formats import DEFAULT_TEXT, LINES_BLOCK, Lines, TextOptions  # noqa: F401

DEAD_LETTER = "dead_letter"
MAIN = "points"
NAMESPACE = "dpstream"


class ParsePointsFn(beam.DoFn):
    """Per-record parsing DoFn: main output ParsedPoint, tagged output ``dead_letter``.

    Counters (namespace ``dpstream``, names prefixed with ``label_prefix``):
    ``read`` (items, counted before parsing), ``valid``, ``dead_letter`` and
    ``dead_letter_<reason>``. ``max_clock_skew_seconds``: see :func:`parse_record`."""

    FORMATS = ("auto", "json", "csv", "numpy")

    def __init__(self, dim: int, fmt: str = "auto", label_prefix: str = "", batch_arrays: bool = False,
                 max_clock_skew_seconds: Optional[float] = None, text_options: Optional[TextOptions] = None):
        self.text_options = (text_options or DEFAULT_TEXT).check(int(dim)) if text_options else None
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 1:
            raise ValueError(f"dim must be an integer >= 1, got {dim!r}")
        if fmt not in self.FORMATS:
            raise ValueError(f"fmt must be one of {self.FORMATS}, got {fmt!r}")
        if max_clock_skew_seconds is not None and not (
                isinstance(max_clock_skew_seconds, numbers.Real) and not isinstance(max_clock_skew_seconds, bool)
                and math.isfinite(max_clock_skew_seconds) and max_clock_skew_seconds >= 0):
            raise ValueError(f"max_clock_skew_seconds must be finite and >= 0, or None, got "
                             f"{max_clock_skew_seconds!r}")
        self.max_clock_skew_seconds = None if max_clock_skew_seconds is None else float(max_clock_skew_seconds)
        self.dim = int(dim)
        self.fmt = fmt
        self.label_prefix = label_prefix
        self.batch_arrays = bool(batch_arrays)
        self._make_counters()

    def _make_counters(self):
        c = lambda name: Metrics.counter(NAMESPACE, self.label_prefix + name)  # noqa: E731
        self._read, self._valid, self.dead_letter_of = c("read"), c("valid"), c("dead_letter")
        self._by_reason = {r: c("dead_letter_" + r) for r in REASONS}

    def __getstate__(self):
        d = dict(self.__dict__)
        for k in ("_read", "_valid", "dead_letter_of", "_by_reason"):
            d.pop(k, None)
        return d

    def __setstate__(self, d):
        self.__dict__.update(d)
        self._make_counters()

    def process(self, element):
        try:
            n = count_items(element.raw if isinstance(element, Record) else as_record(element).raw)
        except Exception:
            n = 1
        self._read.inc(n)
        try:
            points, dead = parse_record(element, self.dim, self.fmt, self.batch_arrays,
                                        getattr(self, "max_clock_skew_seconds", None),
                                        getattr(self, "text_options", None))
            n_points = sum(p.points.shape[0] if isinstance(p, ParsedBatch) else 1 for p in points)
            if n_points + len(dead) != n:  # cannot happen; never lose a record silently
                raise AssertionError(f"{n_points} points + {len(dead)} dead letters for {n} items")
        except Exception as e:  # defensive: the pipeline must never crash on a record
            points = []
            dead = [dead_letter_of(show_raw(element), "internal_error", f"{type(e).__name__}: {e}"[:200],
                          None, None, None) for _ in range(n)]
        if points:
            self._valid.inc(n_points)
        for p in points:
            yield p
        if dead:
            self.dead_letter_of.inc(len(dead))
        for d in dead:
            self._by_reason[d["reason"]].inc()
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, d)


class ParsePoints(beam.PTransform):
    """Parse :class:`Record` elements into :class:`ParsedPoint` plus dead letters.

    ``ParsePoints(dim, fmt="auto"|"json"|"csv"|"numpy", label_prefix="")``; apply
    it to a PCollection of :class:`Record` and read ``result.points`` and
    ``result.dead_letter``. ``label_prefix`` prefixes the counter names (use it
    when one pipeline parses two inputs). With ``batch_arrays=True`` the valid rows
    of a numpy record come out as one :class:`ParsedBatch` (vectorised; what the job
    uses) instead of one ParsedPoint per row. ``max_clock_skew_seconds`` (the job passes
    ``--max_clock_skew_seconds`` for Pub/Sub; None: no check) dead-letters a JSON ``"ts"``
    later than the record's publish time plus that public skew (``ts_in_future``). Apply
    :class:`~transforms.ticks.DedupByMessageId` *before* this transform (a numpy batch's
    rows share one message id)."""

    def __init__(self, dim: int, fmt: str = "auto", label_prefix: str = "", batch_arrays: bool = False,
                 label: Optional[str] = None, max_clock_skew_seconds: Optional[float] = None,
                 text_options: Optional[TextOptions] = None):
        super().__init__(label)
        self._fn = ParsePointsFn(dim, fmt, label_prefix, batch_arrays, max_clock_skew_seconds, text_options)

    def expand(self, pcoll):
        return pcoll | "ParseRecords" >> beam.ParDo(self._fn).with_outputs(DEAD_LETTER, main=MAIN)
