"""The job's contribution bounding on the position clock: one privacy unit per record, bounded per
(run, unit) key.

``ParsePointsWithId(dim, fmt, field)`` parses like :class:`~transforms.parse.ParsePoints` and pairs
every valid point with its privacy id: the record's carrier id (a Pub/Sub attribute,
``Record.privacy_id``), else its JSON record's ``field`` (a string or an integer) or, for a CSV line,
the field at ``csv_index`` (the header column the job resolved at launch). A valid point without one is
dead-lettered ``no_privacy_id``, keeping its slot (⊥ there: no other record moves). With ``pack`` (file
input on the position clock) a block's rows leave grouped by their unit's bucket (a fixed hash of the
id, :data:`UNIT_BUCKETS` per run), one :class:`UnitRows` with the rows' ids per bucket and block, so
the shuffle moves a few arrays per block, not one element per record or per unit; otherwise one
``(id, ParsedPoint)`` per record (streams: :mod:`transforms.unit_timers`).

``BoundContributions(cfg, tick_size)`` then groups the rows by (run, bucket) — the work scales out
with the buckets and a run's keys are gone when the run ends — and applies to each unit's rows, in
slot order, :func:`dpstream.contributions.unit_keep` (records) or
:func:`dpstream.contributions.unit_tick_means` (tick means), vectorised over the bucket's units
(``units_keep``, ``units_tick_means``: each unit decided from its own rows alone, tested against the
one-unit functions): the rule the library applies tick by tick, reading nothing but the unit's own
records and public parameters.
What comes out is one ordinary ParsedBatch per key (a tick mean at the slot of the unit's first record
of the tick), so ``BatchIntoTicks`` and every later stage run unchanged, and the job's releases equal
``DPStreamClusterer.fit(X, privacy_ids=…)``'s for the same seed, rows and ids.
"""
from __future__ import annotations

import functools
import json
import numbers
import zlib
from typing import NamedTuple, Optional

import numpy as np

import apache_beam as beam
from apache_beam.metrics import Metrics

from dpstream.contributions import units_keep, units_tick_means
from dpstream.params import EngineConfig
from transforms.parse import DEAD_LETTER, MAIN, NAMESPACE, Lines, ParsedBatch, ParsedPoint, ParsePointsFn, Record, \
    MAX_SLOT, TextOptions, as_record, dead_letter_of, show_raw

NO_PRIVACY_ID = "no_privacy_id"


UNIT_BUCKETS = 128  # keys per run of the bounding shuffle (public): units are spread over them by a hash of the id


def unit_bucket(pid) -> int:
    """A unit's bucket: a fixed hash of its id (the same in every worker process), never of its records."""
    if isinstance(pid, numbers.Integral) and not isinstance(pid, bool):
        pid = int(pid)  # equal ids (7 and numpy's 7) share a bucket, as they share a unit
    return zlib.crc32(repr(pid).encode("utf-8", "surrogatepass")) % UNIT_BUCKETS


class UnitRows(NamedTuple):
    """Valid rows of one block of a bounded input whose units share a bucket: points ``(m, dim)``, their
    slots and their privacy ids."""
    points: np.ndarray
    slots: np.ndarray
    ids: list


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
    """:class:`ParsePointsFn` whose main output is ``(privacy id, ParsedPoint | UnitRows)``."""

    def __init__(self, dim: int, fmt: str, field: str, label_prefix: str = "",
                 max_clock_skew_seconds: Optional[float] = None, text_options: Optional[TextOptions] = None,
                 csv_index: Optional[int] = None, pack: bool = False):
        super().__init__(dim, fmt, label_prefix, True, max_clock_skew_seconds, text_options)
        self.field, self.csv_index, self.pack = field, csv_index, bool(pack)
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
            if self.pack and isinstance(rec.slot, numbers.Integral) and not isinstance(rec.slot, bool) \
                    and 0 <= rec.slot and rec.slot + len(rec.raw) <= MAX_SLOT:
                yield from self._process_block(rec)
                return
            for i, line in enumerate(rec.raw):  # line by line, each at its own slot
                slot = None if rec.slot is None else rec.slot + i
                yield from self._process_one(Record(line, slot, rec.ts, rec.message_id))
            return
        yield from self._process_one(element)

    def _process_block(self, rec):
        """A block of text lines (the file reader's unit) parsed as ParsePoints parses it; every valid row
        gets the id of its own line, and the rows go out grouped by id, one :class:`UnitRows` per id and
        block: the shuffle by (run, unit) then moves a few arrays per block, not one element per record."""
        lines, base = rec.raw, rec.slot
        pts, slots = [], []
        for out in super().process(rec):
            if isinstance(out, beam.pvalue.TaggedOutput):
                yield out
            elif isinstance(out, ParsedBatch):
                pts.append(out.points)
                slots.append(np.asarray(out.slots, dtype=np.int64))
            else:
                pts.append(out.point[None, :])
                slots.append(np.array([out.slot], dtype=np.int64))
        if not pts:
            return
        X, S = np.concatenate(pts), np.concatenate(slots)
        pid_of = functools.partial(privacy_id_of, field=self.field, csv_index=self.csv_index,
                                   delimiter=self.delimiter)
        ids = list(map(pid_of, map(lines.__getitem__, (S - base).tolist())))  # one JSON read (or split) per line
        bucket_of = {u: -1 if u is None else unit_bucket(u) for u in dict.fromkeys(ids)}
        b = np.fromiter(map(bucket_of.__getitem__, ids), np.int64, len(ids))
        for i in np.flatnonzero(b < 0).tolist():
            self._no_id_letter()
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter_of(
                show_raw(lines[int(S[i]) - base]), NO_PRIVACY_ID, self._no_id_detail(), int(S[i]), rec.ts,
                rec.message_id))
        order = np.argsort(b, kind="stable")
        for grp in np.split(order, np.flatnonzero(np.diff(b[order])) + 1):
            if grp.size and b[grp[0]] >= 0:
                yield int(b[grp[0]]), UnitRows(X[grp], S[grp], list(map(ids.__getitem__, grp.tolist())))

    def _no_id_letter(self) -> None:
        """A point the parser counted valid becomes a dead letter: the counters keep read = valid + dead_letter."""
        self._no_id.inc()
        self._valid.dec()
        self.dead_letter_of.inc()

    def _no_id_detail(self) -> str:
        return f"the record has no privacy id in {self.field!r} (a JSON string or integer, a non-empty CSV field)"

    def _process_one(self, element):
        try:
            rec = element if isinstance(element, Record) else as_record(element)
            pid = rec.privacy_id if isinstance(rec.privacy_id, (str, int)) and not isinstance(rec.privacy_id, bool) \
                and rec.privacy_id != "" else privacy_id_of(rec.raw, self.field, self.csv_index, self.delimiter)
        except Exception:
            rec, pid = None, None
        for out in super().process(element):
            if isinstance(out, beam.pvalue.TaggedOutput):
                yield out
            elif isinstance(out, ParsedBatch):  # numpy input carries no id (refused at launch; defensive)
                for i in range(out.points.shape[0]):
                    self._no_id_letter()
                    yield beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter_of(
                        repr(out.points[i].tolist()), NO_PRIVACY_ID, "a numpy row has no privacy id",
                        int(out.slots[i]) if out.slots[i] >= 0 else None, out.ts, out.message_id))
            elif pid is None:
                self._no_id_letter()
                yield beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter_of(
                    show_raw(rec.raw) if rec is not None else "", NO_PRIVACY_ID, self._no_id_detail(),
                    out.slot, out.ts, out.message_id))
            else:
                yield pid, out


class ParsePointsWithId(beam.PTransform):
    def __init__(self, dim: int, fmt: str, field: str, label_prefix: str = "",
                 max_clock_skew_seconds: Optional[float] = None, label: Optional[str] = None,
                 text_options: Optional[TextOptions] = None, csv_index: Optional[int] = None, pack: bool = False):
        super().__init__(label)
        self._fn = ParsePointsWithIdFn(dim, fmt, field, label_prefix, max_clock_skew_seconds, text_options,
                                       csv_index, pack)

    def expand(self, pcoll):
        return pcoll | "ParseRecordsWithId" >> beam.ParDo(self._fn).with_outputs(DEAD_LETTER, main=MAIN)


class _BoundUnitFn(beam.DoFn):
    """One (run, bucket) key: each unit's rows of the run, in slot order, cut by the public bounds — the rule
    of :func:`~dpstream.contributions.unit_keep` per unit, for all the bucket's units at once
    (:func:`~dpstream.contributions.units_keep`); out as one ParsedBatch (the slots are the clock)."""

    def __init__(self, cfg: EngineConfig, tick_size: int):
        self.cfg, self.tick_size = cfg, int(tick_size)

    def setup(self):
        self._dropped = Metrics.counter(NAMESPACE, "contributions_dropped")  # telemetry, never released

    def process(self, element):
        (run, _), chunks = element
        if run < 0:  # no slot: no tick on the position clock (BatchIntoTicks would drop it as no_clock)
            return
        chunks = list(chunks)
        X = np.concatenate([c.points for c in chunks])
        slots = np.concatenate([c.slots for c in chunks])
        ids = [v for c in chunks for v in c.ids]
        index = {u: i for i, u in enumerate(dict.fromkeys(ids))}
        codes = np.fromiter(map(index.__getitem__, ids), np.int64, len(ids))
        order = np.lexsort((slots, codes))  # by unit, then stream order
        X, slots, codes = X[order], slots[order], codes[order]
        ticks = slots // self.tick_size
        cfg = self.cfg
        if cfg.contribution == "tick_mean":
            means, first = units_tick_means(X, codes, ticks, cfg.max_contributions, cfg)
            self._dropped.inc(len(slots) - len(first))
            if len(first):
                yield ParsedBatch(means, slots[first], None)
            return
        keep = units_keep(codes, ticks, cfg.max_contributions, cfg.per_tick_bound)
        n_keep = int(keep.sum())
        self._dropped.inc(len(slots) - n_keep)
        if n_keep:
            yield ParsedBatch(X[keep], slots[keep], None)


def _by_run(run_slots: int):
    def split(kv):
        key, rows = kv  # (privacy id, ParsedPoint) or (bucket, UnitRows)
        if isinstance(rows, ParsedPoint):  # one record (a stream's, or a test's)
            s = -1 if rows.slot is None else int(rows.slot)
            yield (-1 if s < 0 else s // run_slots, unit_bucket(key)), \
                UnitRows(rows.point[None, :], np.array([s], np.int64), [key])
            return
        runs = rows.slots // run_slots
        if runs.min() == runs.max():  # a block is in one run except at a run boundary
            yield (int(runs[0]), key), rows
            return
        for r in np.unique(runs).tolist():
            m = runs == r
            yield (r, key), UnitRows(rows.points[m], rows.slots[m], [v for v, k in zip(rows.ids, m) if k])
    return split


class BoundContributions(beam.PTransform):
    """``(bucket, UnitRows)`` or ``(privacy id, ParsedPoint)`` → ParsedBatches of the rows the units' bounds
    keep (module docstring)."""

    def __init__(self, cfg: EngineConfig, tick_size: int, label: Optional[str] = None):
        super().__init__(label)
        if cfg.max_contributions is None:
            raise ValueError("BoundContributions needs max_contributions")
        self.cfg, self.tick_size = cfg, int(tick_size)

    def expand(self, pcoll):
        run_slots = self.cfg.horizon_ticks * self.tick_size  # slots per run
        return (pcoll
                | "KeyByRunAndUnit" >> beam.FlatMap(_by_run(run_slots))
                | "GroupByRunAndUnit" >> beam.GroupByKey()
                | "BoundUnit" >> beam.ParDo(_BoundUnitFn(self.cfg, self.tick_size)))
