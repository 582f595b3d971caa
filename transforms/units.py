"""The job's contribution bounding: one privacy unit per record, bounded per (run, unit) key.

``ParsePointsWithId(dim, fmt, field)`` parses like :class:`~transforms.parse.ParsePoints` and pairs
every valid point with its privacy id: its JSON record's ``field`` (a string or an integer) or, for a
CSV line, the field at ``csv_index`` (the header column the job resolved at launch); a valid point without one is dead-lettered ``no_privacy_id``, keeping its slot (⊥ there: no other
record moves). ``BoundContributions(cfg, tick_size)`` then groups the points by (run, unit) — one
key per unit and run, so the work and the state scale out with the units and a run's keys are gone
when the run ends — and applies :func:`dpstream.contributions.unit_keep` (records) or
:func:`dpstream.contributions.unit_tick_means` (tick means) to the unit's points in slot order:
the rule the library applies tick by tick, reading nothing but the unit's own records and public
parameters. What comes out are ordinary ParsedPoints (a tick mean at the slot of the unit's first
record of the tick), so ``BatchIntoTicks`` and every later stage run unchanged, and the job's
releases equal ``DPStreamClusterer.fit(X, privacy_ids=…)``'s for the same seed, rows and ids.

Position clock (bounded files) only: the unit's ticks come from its slots.
"""
from __future__ import annotations

import json
from typing import Optional

import numpy as np

import apache_beam as beam
from apache_beam.metrics import Metrics

from dpstream.contributions import unit_keep, unit_tick_means
from dpstream.params import EngineConfig
from transforms.parse import DEAD_LETTER, MAIN, NAMESPACE, Lines, ParsedBatch, ParsedPoint, ParsePointsFn, Record, \
    TextOptions, as_record, dead_letter_of, show_raw

NO_PRIVACY_ID = "no_privacy_id"


def privacy_id_of(raw, field: str, csv_index: Optional[int] = None, delimiter: str = ","):
    """The privacy id of one text record, or None: a JSON object's ``field`` (a string or an integer;
    booleans, floats, objects and a missing key are no id), or a CSV line's field ``csv_index`` (a
    string; an empty field is no id)."""
    try:
        text = bytes(raw).decode("utf-8") if isinstance(raw, (bytes, bytearray, memoryview)) else raw
        if not isinstance(text, str):
            return None
        text = text.strip().lstrip("\ufeff").strip()
        if not text.startswith("{"):
            if csv_index is None:
                return None
            fields = text.split(delimiter)
            v = fields[csv_index].strip() if csv_index < len(fields) else ""
            return v or None
        v = json.loads(text).get(field)
    except Exception:
        return None
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        return None
    return v


class ParsePointsWithIdFn(ParsePointsFn):
    """:class:`ParsePointsFn` whose main output is ``(privacy id, ParsedPoint)``."""

    def __init__(self, dim: int, fmt: str, field: str, label_prefix: str = "",
                 max_clock_skew_seconds: Optional[float] = None, text_options: Optional[TextOptions] = None,
                 csv_index: Optional[int] = None):
        super().__init__(dim, fmt, label_prefix, False, max_clock_skew_seconds, text_options)
        self.field, self.csv_index = field, csv_index
        self.delimiter = text_options.delimiter if text_options is not None else ","

    def _make_counters(self):
        super()._make_counters()
        self._no_id = Metrics.counter(NAMESPACE, self.label_prefix + "dead_letter_" + NO_PRIVACY_ID)

    def __getstate__(self):
        d = super().__getstate__()
        d.pop("_no_id", None)
        return d

    def process(self, element):
        rec = None
        try:
            rec = element if isinstance(element, Record) else as_record(element)
        except Exception:
            pass
        if rec is not None and isinstance(rec.raw, Lines):
            # a block of text lines (the file reader's unit): every line has its own id, so each line is
            # parsed on its own, at its own slot (JSON parsing is per line anyway)
            for i, line in enumerate(rec.raw):
                slot = None if rec.slot is None else rec.slot + i
                yield from self._process_one(Record(line, slot, rec.ts, rec.message_id))
            return
        yield from self._process_one(element)

    def _process_one(self, element):
        try:
            rec = element if isinstance(element, Record) else as_record(element)
            pid = privacy_id_of(rec.raw, self.field, self.csv_index, self.delimiter)
        except Exception:
            rec, pid = None, None
        for out in super().process(element):
            if isinstance(out, beam.pvalue.TaggedOutput):
                yield out
            elif isinstance(out, ParsedBatch):  # numpy input carries no id (refused at launch; defensive)
                for i in range(out.points.shape[0]):
                    self._no_id.inc()
                    yield beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter_of(
                        repr(out.points[i].tolist()), NO_PRIVACY_ID, "a numpy row has no privacy id",
                        int(out.slots[i]) if out.slots[i] >= 0 else None, out.ts, out.message_id))
            elif pid is None:
                self._no_id.inc()
                yield beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter_of(
                    show_raw(rec.raw) if rec is not None else "", NO_PRIVACY_ID,
                    f"the record has no privacy id in {self.field!r} (a JSON string or integer, a non-empty CSV "
                    f"field)",
                    out.slot, out.ts, out.message_id))
            else:
                yield pid, out


class ParsePointsWithId(beam.PTransform):
    def __init__(self, dim: int, fmt: str, field: str, label_prefix: str = "",
                 max_clock_skew_seconds: Optional[float] = None, label: Optional[str] = None,
                 text_options: Optional[TextOptions] = None, csv_index: Optional[int] = None):
        super().__init__(label)
        self._fn = ParsePointsWithIdFn(dim, fmt, field, label_prefix, max_clock_skew_seconds, text_options,
                                       csv_index)

    def expand(self, pcoll):
        return pcoll | "ParseRecordsWithId" >> beam.ParDo(self._fn).with_outputs(DEAD_LETTER, main=MAIN)


class _BoundUnitFn(beam.DoFn):
    """One (run, unit) key: the unit's points of the run, sorted by slot, cut by the public bounds."""

    def __init__(self, cfg: EngineConfig, tick_size: int):
        self.cfg, self.tick_size = cfg, int(tick_size)

    def setup(self):
        self._dropped = Metrics.counter(NAMESPACE, "contributions_dropped")  # telemetry, never released

    def process(self, element):
        (run, _), pts = element
        if run < 0:  # no slot: no tick on the position clock (BatchIntoTicks would drop it as no_clock)
            return
        pts = sorted(pts, key=lambda p: p.slot)
        slots = np.fromiter((p.slot for p in pts), dtype=np.int64, count=len(pts))
        ticks = slots // self.tick_size
        cfg = self.cfg
        if cfg.contribution == "tick_mean":
            X = np.stack([p.point for p in pts])
            means, first = unit_tick_means(X, ticks, cfg.max_contributions, cfg)
            self._dropped.inc(len(pts) - len(first))
            for m, i in zip(means, first.tolist()):
                p = pts[i]
                yield ParsedPoint(m, p.slot, p.ts, p.message_id, p.publish_time)
            return
        keep = unit_keep(ticks, cfg.max_contributions, cfg.per_tick_bound)
        self._dropped.inc(int((~keep).sum()))
        for i in np.flatnonzero(keep).tolist():
            yield pts[i]


class BoundContributions(beam.PTransform):
    """``(privacy id, ParsedPoint)`` → the ParsedPoints the unit's bounds keep (module docstring)."""

    def __init__(self, cfg: EngineConfig, tick_size: int, label: Optional[str] = None):
        super().__init__(label)
        if cfg.max_contributions is None:
            raise ValueError("BoundContributions needs max_contributions")
        self.cfg, self.tick_size = cfg, int(tick_size)

    def expand(self, pcoll):
        run_ticks = self.cfg.horizon_ticks * self.tick_size  # slots per run

        def key(kv):
            pid, p = kv
            return (-1 if p.slot is None else p.slot // run_ticks, pid), p

        return (pcoll
                | "KeyByRunAndUnit" >> beam.Map(key)
                | "GroupByRunAndUnit" >> beam.GroupByKey()
                | "BoundUnit" >> beam.ParDo(_BoundUnitFn(self.cfg, self.tick_size)))
