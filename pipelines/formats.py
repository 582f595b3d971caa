"""Reading a data engineer's own files: Parquet, CSV columns and delimiters, JSON keys, timestamp units.

The job's options ``--columns``, ``--delimiter`` and ``--ts_unit`` are public reading rules (how a
record becomes a point), fixed before the run like ``--dim``. This module turns them into
:class:`transforms.parse.TextOptions` per file format, resolves CSV header names to field indexes
and Parquet columns to names once at launch (so every worker reads the same fields), reads
Parquet files as float64 arrays (pyarrow ships with Apache Beam), and leaves launch-time hints
(timestamps that look like milliseconds).
"""
from __future__ import annotations

import json
from typing import List, Optional, Sequence, Tuple

import numpy as np

MS_LOOKING_TS = 1e11  # seconds after the year 5138: a "ts" this large is almost surely milliseconds


def parse_columns(text: Optional[str]) -> Optional[Tuple]:
    """``--columns lat,lon`` → ("lat", "lon"); ``--columns 1,2`` → (1, 2); None stays None."""
    if text is None:
        return None
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or any(not p for p in parts):
        raise ValueError(f"--columns {text!r}: give comma-separated column names or 0-based indexes")
    if all(p.isdigit() for p in parts):
        return tuple(int(p) for p in parts)
    if any(p.isdigit() for p in parts):
        raise ValueError(f"--columns {text!r}: give names or indexes, not a mix")
    return tuple(parts)


def parse_delimiter(text: Optional[str]) -> str:
    """``--delimiter`` value: one character; ``\\t`` and ``tab`` mean a tab."""
    if text is None:
        return ","
    t = {"\\t": "\t", "tab": "\t", "TAB": "\t"}.get(text, text)
    if len(t) != 1:
        raise ValueError(f"--delimiter {text!r}: give one character (e.g. ';' or '\\t')")
    return t


def parquet_rows(path: str) -> int:
    """Rows of a Parquet file, from its footer (no data read)."""
    import pyarrow.parquet as pq

    with _open(path) as fh:
        return int(pq.ParquetFile(fh).metadata.num_rows)


def parquet_columns(path: str, columns: Optional[Sequence]) -> Tuple[str, ...]:
    """The Parquet columns a job reads: the named ones (or those indexes), else every numeric column.
    Raises ValueError naming the file, the column and the fix."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with _open(path) as fh:
        schema = pq.ParquetFile(fh).schema_arrow
    numeric = [f.name for f in schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)]
    if columns is None:
        if not numeric:
            raise ValueError(f"{path} has no numeric column: name the columns with --columns")
        return tuple(numeric)
    names = list(schema.names)
    out = []
    for c in columns:
        name = names[c] if isinstance(c, int) and c < len(names) else c
        if name not in names:
            raise ValueError(f"--columns: {path} has no column {c!r} (it has {', '.join(names[:20])})")
        if name not in numeric:
            raise ValueError(f"--columns: column {name!r} of {path} is not numeric ({schema.field(name).type})")
        out.append(name)
    return tuple(out)


def read_parquet(path: str, columns: Optional[Sequence[str]]) -> np.ndarray:
    """The chosen columns of a Parquet file as one float64 (rows, columns) array (nulls → NaN,
    which the parser dead-letters row by row as ``nan_or_inf``)."""
    import pyarrow.parquet as pq

    cols = list(columns) if columns is not None else list(parquet_columns(path, None))
    with _open(path) as fh:
        table = pq.read_table(fh, columns=cols)
    if table.num_rows == 0:
        return np.zeros((0, len(cols)))
    return np.column_stack([table.column(c).to_numpy(zero_copy_only=False).astype(np.float64)
                            for c in cols])


def _open(path: str):
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path, compression_type="uncompressed")


def csv_header_fields(first: bytes, delimiter: str) -> List[str]:
    return [f.strip() for f in first.decode("utf-8", "replace").lstrip("\ufeff").split(delimiter)]


def resolve(job) -> None:
    """Resolve the job's ``--columns`` against its files (at launch), and add hints.

    CSV header names become field indexes (the same in every CSV file, or a ValueError);
    Parquet files get the column names they are read with; JSON keeps names (keys) or indexes
    (into ``"x"``). Also notes JSON timestamps that look like milliseconds."""
    specs, notes = list(job.files or []), job.notes if job.notes is not None else []
    csv_cols = job.columns if job.columns is not None and isinstance(job.columns[0], int) else None
    for i, sp in enumerate(specs):
        if sp.path.lower().endswith(".parquet"):
            specs[i] = sp._replace(columns=parquet_columns(sp.path, job.columns))
            n_cols = len(specs[i].columns)
            if n_cols != job.dim:
                raise ValueError(f"{sp.path}: {n_cols} numeric column(s) ({', '.join(specs[i].columns)}) for --dim "
                                 f"{job.dim}: choose the columns with --columns")
        elif sp.fmt == "numpy" and job.columns is not None:
            raise ValueError(f"--columns applies to CSV, JSON and Parquet files; the rows of {sp.path} are the "
                             f"points: save only the columns to cluster")
        elif sp.fmt == "auto" and job.columns is not None and isinstance(job.columns[0], str):
            raise ValueError(f"--columns {','.join(job.columns)} under --format auto: names could be CSV header "
                             f"fields or JSON keys in {sp.path}; give --format csv or --format json")
        elif sp.fmt == "csv" and job.columns is not None and isinstance(job.columns[0], str):
            first = _first_line(sp.path)  # the header only: never the whole file at launch
            header = csv_header_fields(first.encode("utf-8"), job.delimiter) if first else []
            missing = [c for c in job.columns if c not in header]
            if missing:
                raise ValueError(f"--columns: the header of {sp.path} has no column {missing[0]!r} (it has "
                                 f"{', '.join(header[:20])}; --delimiter is {job.delimiter!r})")
            idx = tuple(header.index(c) for c in job.columns)
            if csv_cols is not None and idx != csv_cols:
                raise ValueError(f"--columns: {sp.path} has the columns at other positions than the first CSV "
                                 f"file; give the files one header")
            csv_cols = idx
        if sp.fmt == "json" and job.tick_seconds is not None and job.ts_unit == "s":
            first = _first_line(sp.path)
            try:
                ts = json.loads(first).get("ts") if first else None
            except (ValueError, AttributeError):
                ts = None
            if isinstance(ts, (int, float)) and not isinstance(ts, bool) and ts > MS_LOOKING_TS:
                notes.append(f'{sp.path}: the first record\'s "ts" {ts!r} looks like milliseconds since the epoch '
                             f"(in seconds it is after the year 5000): pass --ts_unit ms (or us)")
    job.files, job.notes, job.csv_columns = specs, notes, csv_cols
    _resolve_id_column(job)


def _resolve_id_column(job) -> None:
    """With a privacy unit, the CSV files' id column: the header field named ``--privacy_id_field`` (at
    the same position in every CSV file). Without ``--columns`` the point is every other field."""
    unit = getattr(job, "unit", None)
    field = unit["privacy_unit"] if unit else None
    csv_files = [sp for sp in job.files or () if sp.fmt == "csv" or (sp.fmt == "auto" and sp.path.lower().endswith(".csv"))]
    if field is None or not csv_files:
        return
    at, width = None, None
    for sp in csv_files:
        if not sp.skip_header:
            raise ValueError(f"--privacy_id_field names a column of the CSV header of {sp.path}: pass --csv_header "
                             f"(the header line keeps no slot)")
        first = _first_line(sp.path)  # the header only: never the whole file at launch
        header = csv_header_fields(first.encode("utf-8"), job.delimiter) if first else []
        if field not in header:
            raise ValueError(f"--privacy_id_field: the header of {sp.path} has no column {field!r} (it has "
                             f"{', '.join(header[:20])}; --delimiter is {job.delimiter!r}); a CSV file names its "
                             f"columns in its first line")
        if at is not None and (header.index(field), len(header)) != (at, width):
            raise ValueError(f"--privacy_id_field: {sp.path} has the column {field!r} at another position than the "
                             f"first CSV file; give the files one header")
        at, width = header.index(field), len(header)
    if job.csv_columns is None:
        others = tuple(i for i in range(width) if i != at)
        if len(others) != job.dim:
            raise ValueError(f"--privacy_id_field: the CSV header has {len(others)} column(s) besides {field!r} for "
                             f"--dim {job.dim}: choose the point's columns with --columns")
        job.csv_columns = others
    elif at in job.csv_columns:
        raise ValueError(f"--columns includes the privacy id column {field!r}: the id is not a coordinate")
    job.csv_id_column = at


def _first_line(path: str) -> Optional[str]:
    with _open(path) as fh:
        line = fh.readline(1 << 16)
    return line.decode("utf-8", "replace").strip() or None


def text_options(job, fmt: str):
    """The :class:`~transforms.text_formats.TextOptions` of one parser of the job (None: the defaults)."""
    from transforms.text_formats import TextOptions

    cols = getattr(job, "columns", None)
    if fmt == "csv":
        cols = getattr(job, "csv_columns", None)
    elif fmt == "numpy":
        return None
    opt = TextOptions(getattr(job, "delimiter", ","), cols, getattr(job, "ts_unit", "s"))
    return None if opt == TextOptions() else opt
