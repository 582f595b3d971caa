"""Reading rules for text records, Beam-free: the CSV delimiter, the columns that make a point, the
unit of a JSON numeric ``"ts"`` (or an ISO 8601 string), and blocks of lines parsed together.

:mod:`transforms.parse` applies them; the job builds them from ``--delimiter``, ``--columns`` and
``--ts_unit`` (:mod:`pipelines.formats`).
"""
from __future__ import annotations

import datetime
import functools
import re
from typing import Any, NamedTuple, Optional, Tuple

TS_UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6}  # the JSON "ts" number's public unit → per second


def iso_seconds(text: str) -> Tuple[Optional[float], Optional[str]]:
    """An ISO 8601 time with a zone (``2026-12-01T10:00:00Z``, ``…+01:00``) → seconds."""
    t = text.strip()
    try:
        dt = datetime.datetime.fromisoformat(t[:-1] + "+00:00" if t[-1:] in "zZ" else t)
    except ValueError:
        return None, f'"ts" {text[:40]!r} is neither a number nor an ISO 8601 time'
    if dt.tzinfo is None:
        return None, f'"ts" {text[:40]!r} has no time zone: add Z for UTC or an offset such as +01:00'
    try:
        return dt.timestamp(), None
    except (OverflowError, OSError, ValueError):
        return None, f'"ts" {text[:40]!r} is out of range'


class TextOptions(NamedTuple):
    """How text records are read (public options): the CSV ``delimiter``; ``columns``, the
    fields that make the point — 0-based indexes (CSV fields, or indexes into a JSON ``"x"``)
    or JSON key names; the JSON numeric ``"ts"`` unit (``s``, ``ms``, ``us``)."""
    delimiter: str = ","
    columns: Optional[Tuple[Any, ...]] = None
    ts_unit: str = "s"

    @property
    def csv_columns(self) -> Optional[Tuple[int, ...]]:
        return self.columns if self.columns is not None and isinstance(self.columns[0], int) else None

    def check(self, dim: int) -> "TextOptions":
        if not isinstance(self.delimiter, str) or len(self.delimiter) != 1 or self.delimiter in "\r\n\"{[" \
                or self.delimiter.isalnum() or self.delimiter in ".+-":
            raise ValueError(f"delimiter must be one character that cannot be part of a number, got "
                             f"{self.delimiter!r}")
        if self.ts_unit not in TS_UNITS:
            raise ValueError(f"ts_unit must be one of {', '.join(TS_UNITS)}, got {self.ts_unit!r}")
        if self.columns is not None:
            cols = tuple(self.columns)
            kinds = {isinstance(c, str) for c in cols}
            if not cols or len(kinds) != 1 or any(isinstance(c, bool) for c in cols) \
                    or any(not isinstance(c, (str, int)) for c in cols) or any(isinstance(c, int) and c < 0 for c in cols):
                raise ValueError(f"columns must be key names or indexes >= 0, not a mix, got {self.columns!r}")
            if len(set(cols)) != len(cols):
                raise ValueError(f"columns {self.columns!r} name a column twice")
            if len(cols) != dim:
                raise ValueError(f"{len(cols)} columns for dimension {dim}: give one column per coordinate")
        return self


DEFAULT_TEXT = TextOptions()


class Lines(tuple):
    """A block of text lines of a bounded input (``Record(Lines(lines), slot)``): line ``i`` has
    slot ``slot + i`` and is parsed exactly as ``Record(lines[i], slot + i)`` would be, but the
    block's CSV lines of plain numbers are converted in one numpy call and come out as one
    :class:`ParsedBatch` (``batch_arrays``); every other line takes the per-line path, so its
    point or dead letter (reason, detail, slot) is the same as today's per-line parse."""
    __slots__ = ()


LINES_BLOCK = 4096  # lines per Lines record from a file source


_OTHER_DELIMITERS = (",", ";", "\t", "|")


def delimiter_hint(text: str, delimiter: str) -> str:
    """For a line with one field: another common delimiter it contains, as advice."""
    other = next((d for d in _OTHER_DELIMITERS if d != delimiter and d in text), None)
    if other is None:
        return ""
    shown = "\\t" if other == "\t" else other
    return f" (the line has no {delimiter!r} but contains {other!r}: pass --delimiter '{shown}')"


@functools.lru_cache(maxsize=64)
def csv_bytes_re(dim: int):
    num = rb"[ \t]*[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?[ \t]*"
    return re.compile(num + (b"," + num) * (dim - 1) + rb"\Z")
