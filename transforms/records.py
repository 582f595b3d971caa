"""The records dpstream parses, the points it makes of them and the dead letters it makes of the rest.

No Beam here: the job's :mod:`transforms.parse`, the report step and any tool share these types.

Input elements
--------------
Each input element is a :class:`Record` ``(raw, slot, ts, message_id)``:

* ``raw`` — ``bytes`` or ``str`` (one JSON object or one CSV line), or a numpy
  array of shape ``(dim,)`` (one point) or ``(m, dim)`` (a batch of m points);
* ``slot`` — the record's public position in a bounded input (its raw line or
  row index), **assigned before parsing**, or ``None`` (streams);
* ``ts`` — the carrier's time in seconds since the epoch (for Pub/Sub the
  message's ``publish_time``, set by the server), or ``None``; a Beam ``Timestamp``
  or an aware ``datetime`` is accepted too. It is the fallback event time *and*
  the record's publish time (below);
* ``message_id`` — the Pub/Sub message id, or ``None``.

For convenience a bare ``str``/``bytes``/``ndarray`` is read as
``Record(raw)`` and a pair ``(slot, raw)`` (what ``enumerate(lines)`` gives) as
``Record(raw, slot)``.  Anything else is dead-lettered as ``unsupported_type``.

Dead letters
------------
A record that does not parse becomes JSON-ready dicts ``{raw, reason, detail, slot, ts, message_id}``
(:func:`dead_letter_of`): ``raw`` is a ``str`` of at most :data:`MAX_RAW_CHARS` UTF-8 bytes
(:func:`show_raw`), ``reason`` one of :data:`REASONS`.
"""
from __future__ import annotations

import datetime
import math
import numbers
from typing import Any, Iterable, List, NamedTuple, Optional, Tuple

import numpy as np

from transforms.text_formats import Lines

MAX_RAW_CHARS = 10 * 1024  # the dead letter's raw text, in UTF-8 bytes
MAX_SLOT = 2 ** 62  # slots must fit int64 arithmetic downstream

REASONS = (
    "bad_slot",          # Record.slot is not a non-negative integer < 2**62
    "bad_ts",            # Record.ts or the JSON "ts" is not a finite number
    "unsupported_type",  # raw is not str / bytes / ndarray
    "not_utf8",          # bytes that do not decode as UTF-8
    "empty",             # blank text, 0-row array, 0-length vector
    "malformed_json",    # JSON syntax error (also absurd nesting / huge integers)
    "not_object",        # JSON value is not an object
    "missing_x",         # JSON object without "x"
    "wrong_type",        # JSON "x" is not a list
    "wrong_shape",       # array that is not 1-D or 2-D
    "wrong_dimension",   # number of coordinates != dim
    "non_numeric",       # a coordinate is not a number (bool, string, null, complex, object dtype …)
    "nan_or_inf",        # a coordinate is NaN, ±inf, or overflows float64
    "ts_in_future",      # the JSON "ts" is later than the publish time (Record.ts) + max_clock_skew_seconds
    "internal_error",    # a bug in the parser; the record is still dead-lettered, never lost
)


class Record(NamedTuple):
    """One input record, before parsing (see the module docstring)."""
    raw: Any
    slot: Optional[int] = None
    ts: Optional[float] = None
    message_id: Optional[str] = None
    privacy_id: Any = None  # the carrier's privacy id (a Pub/Sub attribute), with a privacy unit only


class ParsedPoint(NamedTuple):
    """One valid point: ``point`` is float64 of shape ``(dim,)``, finite; ``ts`` its event
    time; ``publish_time`` the carrier's time (``Record.ts``: for Pub/Sub the server's
    publish time), kept even when the payload's own ``ts`` wins."""
    point: np.ndarray
    slot: Optional[int]
    ts: Optional[float]
    message_id: Optional[str] = None
    publish_time: Optional[float] = None


class ParsedBatch(NamedTuple):
    """The valid rows of one numpy record (``ParsePoints(..., batch_arrays=True)``):
    ``points`` float64 ``(m, dim)`` finite, ``slots`` int64 ``(m,)`` (−1 = none), and
    the record's ``ts``, ``message_id`` and ``publish_time`` (a numpy record has no payload
    ``ts``: both are the carrier's). The same points as m ParsedPoints, as one element."""
    points: np.ndarray
    slots: np.ndarray
    ts: Optional[float]
    message_id: Optional[str] = None
    publish_time: Optional[float] = None



def records_from_lines(lines: Iterable[Any], start_slot: int = 0, ts: Optional[float] = None) -> List[Record]:
    """Records of a bounded text input: line ``i`` gets slot ``start_slot + i``.

    The slot is the raw line index, assigned before anything is parsed, so a
    malformed line still owns its slot (P2)."""
    return [Record(line, start_slot + i, ts) for i, line in enumerate(lines)]


def records_from_arrays(arrays: Iterable[np.ndarray], start_slot: int = 0,
                        ts: Optional[float] = None) -> List[Record]:
    """Records of a bounded numpy input: batch ``b`` gets the slot of its first row,
    ``start_slot +`` the item counts of batches ``0..b-1`` (see :func:`count_items`)."""
    out, slot = [], start_slot
    for a in arrays:
        out.append(Record(a, slot, ts))
        slot += count_items(a)
    return out


def count_items(raw: Any) -> int:
    """How many items (points or dead letters) a record's ``raw`` holds: ``m`` for a
    2-D array of ``m ≥ 1`` rows or a block of m lines, otherwise 1. Computed before parsing."""
    if isinstance(raw, np.ndarray) and raw.ndim == 2 and raw.shape[0] >= 1:
        return int(raw.shape[0])
    if isinstance(raw, Lines):
        return max(1, len(raw))
    return 1



def as_record(element: Any) -> Record:
    """The :class:`Record` of an input element (a bare payload, a ``(slot, raw)`` pair or a Record)."""
    if isinstance(element, Record):
        return element
    if isinstance(element, (str, bytes, bytearray, memoryview, np.ndarray)):
        return Record(element)
    if (isinstance(element, tuple) and len(element) == 2 and isinstance(element[0], numbers.Integral)
            and not isinstance(element[0], bool)):
        return Record(element[1], element[0])
    return Record(element)  # dead-lettered as unsupported_type


def _clip_text(s: str, total: Optional[str] = None) -> str:
    """``s`` cut to at most MAX_RAW_CHARS UTF-8 bytes, with a marker when cut."""
    head = s[:MAX_RAW_CHARS + 1]  # every char is ≥ 1 byte
    b = head.encode("utf-8", "surrogatepass")
    if len(b) <= MAX_RAW_CHARS and len(head) == len(s):
        return s
    marker = f"...[truncated; {total or f'{len(s)} chars'} in all]"
    keep = MAX_RAW_CHARS - len(marker.encode("utf-8"))
    while keep > 0 and (b[keep] & 0xC0) == 0x80:  # back off to a char boundary
        keep -= 1
    return b[:keep].decode("utf-8", "surrogatepass") + marker


def show_raw(raw: Any) -> str:
    """The raw record as a string for the dead letter (never raises)."""
    try:
        if isinstance(raw, str):
            return _clip_text(raw)
        if isinstance(raw, (bytes, bytearray, memoryview)):
            raw_b = bytes(raw)
            try:
                return _clip_text(raw_b.decode("utf-8"), f"{len(raw_b)} bytes")
            except UnicodeDecodeError:
                return _clip_text(repr(raw_b[:MAX_RAW_CHARS]), f"{len(raw_b)} bytes")
        return _clip_text(repr(raw))
    except Exception as e:  # a hostile __repr__
        return f"<unrepresentable {type(raw).__name__}: {type(e).__name__}>"


def as_seconds(ts: Any) -> Tuple[Optional[float], Optional[str]]:
    """(seconds, None) or (None, why) for a carrier timestamp."""
    if ts is None:
        return None, None
    try:
        if isinstance(ts, bool):
            return None, "a boolean"
        if isinstance(ts, numbers.Real):
            v = float(ts)
        elif hasattr(ts, "micros"):  # apache_beam.utils.timestamp.Timestamp
            v = ts.micros / 1e6
        elif isinstance(ts, datetime.datetime):
            if ts.tzinfo is None:
                return None, "a naive datetime"
            v = ts.timestamp()
        else:
            return None, f"of type {type(ts).__name__}"
    except (OverflowError, ValueError, TypeError) as e:
        return None, f"unconvertible ({type(e).__name__})"
    if not math.isfinite(v):
        return None, repr(v)
    return v, None


def check_slot(slot: Any) -> Tuple[Optional[int], Optional[str]]:
    """(slot, None) or (None, why) for a record's slot."""
    if slot is None:
        return None, None
    if isinstance(slot, (bool, np.bool_)) or not isinstance(slot, numbers.Integral):
        return None, f"slot must be an integer, got {type(slot).__name__}"
    s = int(slot)
    if not 0 <= s < MAX_SLOT:
        return None, f"slot {s} outside [0, 2**62)"
    return s, None


def message_id_text(mid: Any) -> Optional[str]:
    """The carrier's message id as text (None stays None)."""
    if mid is None or isinstance(mid, str):
        return mid
    if isinstance(mid, (bytes, bytearray)):
        return bytes(mid).decode("utf-8", "backslashreplace")
    return str(mid)



def dead_letter_of(raw_text: str, reason: str, detail: str, slot, ts, mid) -> dict:
    """One dead letter (``detail`` cut to 500 characters)."""
    return {"raw": raw_text, "reason": reason, "detail": detail[:500], "slot": slot,
            "ts": ts, "message_id": mid}
