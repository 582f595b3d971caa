"""The Beam-free parser: one :class:`~transforms.records.Record` to validated float64 points and dead
letters (:func:`parse_record`). :class:`~transforms.parse.ParsePoints` runs it in the job; the report step
runs it without Beam, so both read a file alike.

Formats
-------
* JSON: an object ``{"x": [x_1, ..., x_dim]}`` with an optional ``"ts"``: a
  number (seconds since the epoch, or the public ``ts_unit``: ``ms``, ``us``) or an
  ISO 8601 string with a time zone (``"2026-12-01T10:00:00Z"``). With ``columns``
  the point is read from the named keys (``{"lat": …, "lon": …}``) or from those
  indexes of ``"x"``. The record's own ``ts`` wins over the
  carrier's ``Record.ts`` as the event time (the publish time is the fallback
  clock). With ``max_clock_skew_seconds`` set, a ``"ts"`` later than the carrier's
  time plus that public skew is dead-lettered (``ts_in_future``): a record cannot
  have happened after it was published, and a future ``ts`` would put it in a tick
  that closes later than its publication allows. Extra keys are ignored. Numbers
  must be JSON numbers: booleans and numeric strings are rejected
  (``non_numeric``).
* CSV: ``dim`` comma-separated decimal numbers (ASCII digits, optional sign,
  fraction and exponent; surrounding blanks and a UTF-8 BOM are ignored); another
  ``delimiter`` (``;``, a tab …) and ``columns`` (0-based field indexes: the other
  fields may hold anything, e.g. a user id) are options. A line with one field
  where another common delimiter appears says so in its dead letter's detail.
* numpy: an integer or floating array (``bool``, complex, object, string dtypes
  are ``non_numeric``). A 2-D array of m ≥ 1 rows holds **m items**; row ``i``
  gets slot ``slot + i`` (``None`` if ``slot`` is ``None``) and shares the
  record's ``ts`` and ``message_id``. A bounded source must therefore give batch
  ``b`` the slot ``sum of the row counts of batches 0..b-1``, so slots equal row
  indices of the whole input (:func:`~transforms.records.records_from_arrays` does this). Every
  other array (0-d, 3-d or more, a 2-D array with 0 rows) is one item.
* ``fmt="auto"``: arrays are numpy; text starting with ``{`` or ``[`` is JSON;
  other text is CSV. ``fmt="json"`` reads every text record as JSON (a CSV line is
  ``malformed_json``, "not valid JSON"), ``fmt="csv"`` every text record as CSV. The job
  picks the format from each file's extension (``pipelines.sources.plan_files``) and
  sniffs (``auto``) only for Pub/Sub or with ``--format auto``.

Checks are made in this order; the first failing one names the reason:
record fields (``bad_slot``, ``bad_ts``), type (``unsupported_type``,
``not_utf8``), ``empty``, syntax (``malformed_json``, ``not_object``,
``missing_x``, ``wrong_type``, ``wrong_shape``), ``wrong_dimension``,
``non_numeric``, ``nan_or_inf``, then the JSON ``ts`` field (``bad_ts``, then
``ts_in_future``).
"""
from __future__ import annotations

import functools
import io
import json
import math
import re
import warnings
from typing import Any, List, Optional, Tuple

import numpy as np

from transforms.records import (MAX_SLOT, ParsedBatch, ParsedPoint, Record, as_record, as_seconds, check_slot,
                                count_items, dead_letter_of, message_id_text, show_raw)
from transforms.text_formats import (DEFAULT_TEXT, TS_UNITS, Lines, TextOptions, csv_bytes_re, delimiter_hint,
                                     iso_seconds)

_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\Z", re.ASCII)
_NONFINITE_WORDS = frozenset(
    s + w for s in ("", "+", "-") for w in ("nan", "inf", "infinity"))


def _json_ts(ts: Any, unit: str = "s") -> Tuple[Optional[float], Optional[str]]:
    """The JSON "ts" field: a JSON number (not a boolean) in ``unit``, or an ISO 8601 string
    with a zone; finite seconds."""
    if isinstance(ts, str):
        return iso_seconds(ts)
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        return None, f'"ts" must be a number or an ISO 8601 string, got {type(ts).__name__}'
    try:
        v = float(ts) / TS_UNITS[unit] if unit != "s" else float(ts)
    except OverflowError:
        return None, '"ts" overflows float64'
    if not math.isfinite(v):
        return None, f'"ts" is {v!r}'
    return v, None



def _parse_values_json(obj: Any, dim: int, columns=None) -> Tuple[Optional[np.ndarray], Optional[str], str]:
    if not isinstance(obj, dict):
        return None, "not_object", f"expected a JSON object, got {type(obj).__name__}"
    if columns is not None and isinstance(columns[0], str):  # named keys: {"lat": …, "lon": …}
        missing = [c for c in columns if c not in obj]
        if missing:
            return None, "missing_x", f"no {missing[0]!r} key (the columns are {', '.join(columns)})"
        x = [obj[c] for c in columns]
    else:
        if "x" not in obj:
            return None, "missing_x", 'no "x" key'
        x = obj["x"]
        if not isinstance(x, list):
            return None, "wrong_type", f'"x" must be a list, got {type(x).__name__}'
        if columns is not None:
            if len(x) <= max(columns):
                return None, "wrong_dimension", f'"x" has {len(x)} values; the columns need {max(columns) + 1}'
            x = [x[c] for c in columns]
    if len(x) != dim:
        return None, "wrong_dimension", f"expected {dim} values, got {len(x)}"
    for i, v in enumerate(x):
        if type(v) is not float and type(v) is not int:  # excludes bool, str, None, lists
            return None, "non_numeric", f"x[{i}] is {type(v).__name__}"
    try:
        vals = [float(v) for v in x]
    except OverflowError:
        return None, "nan_or_inf", "an integer coordinate overflows float64"
    return _finite(np.array(vals, dtype=np.float64))


@functools.lru_cache(maxsize=64)
def _csv_line_re(dim: int):
    num = r"[ \t]*[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?[ \t]*"
    return re.compile(num + ("," + num) * (dim - 1) + r"\Z", re.ASCII)


def _parse_values_csv(text: str, dim: int, delimiter: str = ",",
                      columns=None) -> Tuple[Optional[np.ndarray], Optional[str], str]:
    if delimiter == "," and columns is None and _csv_line_re(dim).match(text):  # fast path: dim plain numbers
        return _finite(np.array(text.split(","), dtype=np.float64))
    fields = text.split(delimiter)
    need = dim if columns is None else max(columns) + 1
    if (len(fields) != dim) if columns is None else (len(fields) < need):
        hint = delimiter_hint(text, delimiter) if len(fields) == 1 else ""
        return None, "wrong_dimension", f"expected {need if columns is not None else dim} values, got " \
                                        f"{len(fields)}{hint}"
    idx = range(dim) if columns is None else columns
    vals = []
    for i in idx:
        f = fields[i].strip()
        if _NUMBER.match(f):
            vals.append(float(f))  # '1e999' -> inf, caught below
        elif f.lower() in _NONFINITE_WORDS:
            vals.append(math.nan)
        else:
            return None, "non_numeric", f"field {i} is not a number: {f[:40]!r}"
    return _finite(np.array(vals, dtype=np.float64))


def _finite(arr: np.ndarray):
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.argmax(bad))
        return None, "nan_or_inf", f"coordinate {i} is {float(arr[i])!r}"
    return arr, None, ""


def _parse_array(arr: np.ndarray, dim: int, slot, ts, mid, out_points, out_dead, batch=None) -> None:
    """Split an array into items; rows get slots slot + row."""
    def dead_all(reason, detail, rows=None):
        if rows is None:
            out_dead.append(dead_letter_of(show_raw(arr), reason, detail, slot, ts, mid))
            return
        for i in range(rows.shape[0]):
            out_dead.append(dead_letter_of(show_raw(rows[i]), reason, detail,
                                  None if slot is None else slot + i, ts, mid))

    if arr.ndim not in (1, 2):
        return dead_all("wrong_shape", f"array of shape {arr.shape}; expected ({dim},) or (m, {dim})")
    if arr.size == 0 and (arr.ndim == 1 or arr.shape[0] == 0):
        return dead_all("empty", f"array of shape {arr.shape}")
    rows = arr.reshape(1, -1) if arr.ndim == 1 else arr
    m = rows.shape[0]
    if slot is not None and slot + m > MAX_SLOT:
        return dead_all("bad_slot", f"slots {slot}..{slot + m - 1} exceed 2**62", rows)
    if rows.shape[1] != dim:
        return dead_all("wrong_dimension", f"expected {dim} values per row, got {rows.shape[1]}", rows)
    if arr.dtype.kind not in "iuf":
        return dead_all("non_numeric", f"array dtype {arr.dtype} is not integer or floating", rows)
    with np.errstate(over="ignore", invalid="ignore"):
        f = np.array(rows, dtype=np.float64, copy=True, order="C")  # own copy: callers may reuse their buffer
    ok = np.isfinite(f).all(axis=1)
    if batch is not None:  # vectorised: one ParsedBatch of the valid rows, dead letters for the rest
        idx = np.flatnonzero(ok)
        if idx.size:
            slots = idx.astype(np.int64) + slot if slot is not None else np.full(idx.size, -1, np.int64)
            batch.append(ParsedBatch(f if idx.size == m else f[idx], slots, ts, mid, ts))  # f: a fresh copy
        for i in np.flatnonzero(~ok):
            s_ = None if slot is None else slot + int(i)
            j = int(np.argmax(~np.isfinite(f[i])))
            out_dead.append(dead_letter_of(show_raw(rows[i]), "nan_or_inf", f"coordinate {j} is {float(f[i, j])!r}", s_, ts, mid))
        return
    for i in range(m):
        s = None if slot is None else slot + i
        if ok[i]:
            out_points.append(ParsedPoint(f[i], s, ts, mid, ts))
        else:
            j = int(np.argmax(~np.isfinite(f[i])))
            out_dead.append(dead_letter_of(show_raw(rows[i]), "nan_or_inf", f"coordinate {j} is {float(f[i, j])!r}", s, ts, mid))



def parse_record(element: Any, dim: int, fmt: str = "auto", batch_arrays: bool = False,
                 max_clock_skew_seconds: Optional[float] = None,
                 text_options: Optional["TextOptions"] = None) -> Tuple[List[Any], List[dict]]:
    """Parse one element into ``(points, dead_letters)``; never raises.

    ``len(points) + len(dead_letters) == count_items(record.raw)`` always, where a
    :class:`ParsedBatch` (numpy records with ``batch_arrays``) counts as its rows.
    A field whose own conversion raises (a hostile ``__str__``/``__float__``) makes
    ``internal_error`` dead letters that keep the record's slot when it is valid.
    ``max_clock_skew_seconds`` (None: no check) dead-letters a JSON ``"ts"`` later than the
    record's carrier time (``Record.ts``, the publish time) plus the skew (``ts_in_future``).
    ``text_options``: the CSV delimiter, the columns and the JSON ts unit (:class:`TextOptions`)."""
    try:
        return _parse_record(element, dim, fmt, batch_arrays, max_clock_skew_seconds,
                             text_options or DEFAULT_TEXT)
    except Exception as e:
        try:
            n = count_items(as_record(element).raw)
        except Exception:
            n = 1
        try:
            slot = check_slot(element.slot)[0] if isinstance(element, Record) else None
        except Exception:
            slot = None
        detail = f"{type(e).__name__} while parsing"
        return [], [dead_letter_of(_safe_show(element), "internal_error", detail, None if slot is None else slot + i,
                          None, None) for i in range(n)]


def _safe_show(element: Any) -> str:
    try:
        return show_raw(element.raw if isinstance(element, Record) else element)
    except Exception:
        return f"<unprintable {type(element).__name__}>"


def _parse_record(element: Any, dim: int, fmt: str, batch_arrays: bool,
                  max_clock_skew_seconds: Optional[float] = None,
                  opt: "TextOptions" = None) -> Tuple[List[Any], List[dict]]:
    opt = opt or DEFAULT_TEXT
    rec = as_record(element)
    raw = rec.raw
    points: List[ParsedPoint] = []
    dead: List[dict] = []
    mid = message_id_text(rec.message_id)
    slot, slot_err = check_slot(rec.slot)
    ts, ts_err = as_seconds(rec.ts)
    publish_time = ts  # the carrier's time: the event time below may become the payload's own ts
    n_items = count_items(raw)

    def one(reason, detail, ts_=ts):
        if n_items == 1:
            dead.append(dead_letter_of(show_raw(raw), reason, detail, slot, ts_, mid))
        else:  # a 2-D batch: one dead letter per row, each with its own slot
            for i in range(n_items):
                dead.append(dead_letter_of(show_raw(raw[i]), reason, detail, None if slot is None else slot + i, ts_, mid))
        return points, dead

    if isinstance(raw, Lines) and len(raw) and not slot_err and not ts_err \
            and (slot is None or slot + len(raw) <= MAX_SLOT):
        _parse_lines(raw, dim, fmt, slot, rec, opt, max_clock_skew_seconds, batch_arrays, points, dead)
        return points, dead
    if slot_err:
        return one("bad_slot", slot_err)
    if ts_err:
        return one("bad_ts", f"record ts is {ts_err}")

    if isinstance(raw, np.ndarray):
        if fmt not in ("auto", "numpy"):
            return one("unsupported_type", f"ndarray given to a {fmt} parser")
        _parse_array(raw, dim, slot, ts, mid, points, dead, points if batch_arrays else None)
        return points, dead
    if isinstance(raw, (bytes, bytearray, memoryview)):
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as e:
            return one("not_utf8", f"invalid UTF-8 at byte {e.start}")
    elif isinstance(raw, str):
        text = raw
    else:
        return one("unsupported_type", f"raw of type {type(raw).__name__}")

    text = text.strip().lstrip("\ufeff").strip()
    if not text:
        return one("empty", "blank record")
    kind = fmt
    if kind == "auto":
        kind = "json" if text[0] in "{[" else "csv"
    if kind == "json":
        try:
            obj = json.loads(text)
        except Exception as e:  # JSONDecodeError, RecursionError, ValueError (huge ints)
            return one("malformed_json", f"not valid JSON ({type(e).__name__}: {e})"[:200])
        vec, reason, detail = _parse_values_json(obj, dim, opt.columns)
        if vec is not None and obj.get("ts") is not None:
            jts, jerr = _json_ts(obj["ts"], opt.ts_unit)
            if jerr:
                return one("bad_ts", jerr)
            if max_clock_skew_seconds is not None and publish_time is not None \
                    and jts > publish_time + max_clock_skew_seconds:
                return one("ts_in_future", f'"ts" {jts!r} is {jts - publish_time:.6g} s after the publish time '
                                           f'{publish_time!r}, more than the public clock skew '
                                           f'{max_clock_skew_seconds:g} s', ts_=jts)
            ts = jts
    elif kind == "csv":
        vec, reason, detail = _parse_values_csv(text, dim, opt.delimiter, opt.csv_columns)
        if vec is None and fmt == "csv" and text[0] in "{[":
            detail = f"{detail} (the record looks like JSON but is read as CSV: check --format)"
    else:  # fmt == "numpy" given text
        return one("unsupported_type", f"{type(raw).__name__} given to a numpy parser")
    if vec is None:
        return one(reason, detail)
    points.append(ParsedPoint(vec, slot, ts, mid, publish_time))
    return points, dead


_CSV_NUMBER_BYTES = np.zeros(256, dtype=bool)
_CSV_NUMBER_BYTES[np.frombuffer(b"0123456789+-.eE \t,\n", np.uint8)] = True


def plain_csv_block(lines, dim: int) -> Optional[np.ndarray]:
    """The ``(len(lines), dim)`` values of a block whose every line :func:`csv_bytes_re` matches (plain numbers,
    ``dim`` per line), else None; checked for the whole block at once (a regex call per line cost ~1.3 s per
    10⁶ lines): only the bytes of numbers, commas and newlines; exactly ``dim`` fields per line; numpy's
    conversion succeeds. Over those bytes numpy's reader accepts exactly the regex's numbers (every field of up
    to 5 of them checked; tests/test_own_data.py checks blocks against the regex line by line)."""
    if not lines or set(map(type, lines)) != {bytes} or not all(lines):
        return None
    block = b"\n".join(lines)
    buf = np.frombuffer(block, np.uint8)
    if not _CSV_NUMBER_BYTES[buf].all():
        return None
    sep = buf[(buf == 44) | (buf == 10)]  # commas and newlines, in order: a newline after every dim − 1 commas
    n = len(lines)
    if sep.size != n * dim - 1 or np.count_nonzero(sep == 10) != n - 1 or not (sep[dim - 1::dim] == 10).all():
        return None
    try:  # numpy's reader: ~25% faster than converting the split fields (the same correctly rounded doubles)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "no data": blank lines only
            vals = np.loadtxt(io.BytesIO(block), delimiter=",", dtype=np.float64, comments=None, ndmin=2)
    except (ValueError, UserWarning):
        return None
    return vals if vals.shape == (len(lines), dim) else None  # a blank line is skipped there, not read


def _parse_lines(lines: "Lines", dim: int, fmt: str, slot, rec: Record, opt: "TextOptions",
                 skew, batch_arrays: bool, points: list, dead: list) -> None:
    """A block of lines: the plain-number CSV lines in one numpy conversion, the rest line by line (their
    points batched when they share the block's carrier time)."""
    fast = np.zeros(len(lines), dtype=bool)
    vals = None
    if fmt == "csv" and opt.delimiter == "," and opt.columns is None and batch_arrays:
        vals = plain_csv_block(lines, dim)
        if vals is not None:
            fast[:] = True
        else:  # some line is not plain numbers: which ones, line by line
            match = csv_bytes_re(dim).match
            fast = np.fromiter((isinstance(ln, bytes) and match(ln) is not None for ln in lines), bool, len(lines))
    idx = np.flatnonzero(fast)
    if idx.size:
        if vals is None:
            block = b",".join(lines[i] for i in idx)
            vals = np.array(block.split(b","), dtype=np.float64).reshape(idx.size, dim)
        ok = np.isfinite(vals).all(axis=1)
        fast[idx[~ok]] = False  # an overflow (1e999) takes the per-line path for its exact dead letter
        keep = idx[ok]
        if keep.size:
            slots = keep.astype(np.int64) + slot if slot is not None else np.full(keep.size, -1, np.int64)
            ts = as_seconds(rec.ts)[0]
            points.append(ParsedBatch(np.ascontiguousarray(vals[ok]), slots, ts, message_id_text(rec.message_id), ts))
    loose = []
    for i in np.flatnonzero(~fast):
        s_ = None if slot is None else slot + int(i)
        # the guarded parser: a line that raises is that line's dead letter, never its block's
        p_, d_ = parse_record(Record(lines[i], s_, rec.ts, rec.message_id), dim, fmt, batch_arrays, skew, opt)
        loose.extend(p_)
        dead.extend(d_)
    if batch_arrays and slot is not None and len(loose) > 1:
        # points that share the block's carrier time (JSON lines without a "ts" of their own, CSV lines off the
        # fast path) travel as one ParsedBatch; BatchIntoTicks sorts by slot, so the releases cannot tell
        carrier, mid = as_seconds(rec.ts)[0], message_id_text(rec.message_id)
        same = [p for p in loose if isinstance(p, ParsedPoint) and p.ts == carrier and p.publish_time == carrier]
        if len(same) > 1:
            points.append(ParsedBatch(np.stack([p.point for p in same]),
                                      np.array([p.slot for p in same], dtype=np.int64), carrier, mid, carrier))
            same_ids = {id(p) for p in same}
            loose = [p for p in loose if id(p) not in same_ids]
    points.extend(loose)

