"""Sources of the main job: file globs (.npy, .parquet, .csv, .jsonl), Pub/Sub, the built-in stream.

Every source emits :class:`transforms.parse.Record` elements. A bounded source
assigns each record its **slot** (its raw line or row index in the whole input,
files taken in sorted name order) *before* parsing, so a malformed record keeps
its slot and no other record changes tick (P2).
"""
from __future__ import annotations

import io
import os
from typing import List, NamedTuple, Optional, Tuple

import numpy as np

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipelines.file_bytes import count_lines, read_all, split_lines
from transforms.parse import LINES_BLOCK, Lines, Record

FILE_FORMATS = {".npy": "numpy", ".parquet": "parquet", ".csv": "csv", ".jsonl": "json", ".json": "json",
                ".ndjson": "json"}
NPY_CHUNK_ROWS = 8192


def file_format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in FILE_FORMATS:
        raise ValueError(f"cannot read {path}: use .npy, .parquet, .csv or .jsonl files")
    return FILE_FORMATS[ext]


def match_files(pattern: str) -> List[str]:
    """The files of a glob, sorted by name (the order that defines slots)."""
    try:
        res = FileSystems.match([pattern])[0]
    except Exception as e:  # BeamIOError for a glob that matches nothing
        raise ValueError(f"--input {pattern} matches no file") from e
    paths = sorted(m.path for m in res.metadata_list)
    if not paths:
        raise ValueError(f"--input {pattern} matches no file")
    for p in paths:
        file_format(p)
    return paths


def _load_npy(path: str) -> np.ndarray:
    """A .npy file's array: memory-mapped when the file is local (the records copy their rows out of
    the page cache; at 10^5 × 384 reading the whole file into bytes and then into an array cost two
    copies of it), else read through Beam's filesystems."""
    if "://" not in path:
        try:
            return np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError:  # e.g. an object array, which cannot be mapped: the same error as below
            pass
    return np.load(io.BytesIO(read_all(path)), allow_pickle=False)


def npy_header(path: str):
    """``(shape, dtype, data_offset)`` from a .npy file's header, without reading its data.
    Raises ValueError naming the file when it is not a .npy file dpstream can read: an
    object array (it would need pickle, which dpstream never runs on input) or a truncated file."""
    with FileSystems.open(path, compression_type="uncompressed") as fh:
        try:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, _, dtype = read(fh)
        except ValueError as e:
            raise ValueError(f"{path} is not a readable .npy file ({e}); write it with numpy.save") from None
        offset = fh.tell()
    if dtype.hasobject:
        raise ValueError(f"{path} holds Python objects (dtype {dtype}), which can only be loaded by unpickling "
                         f"(never done on input): save a numeric array, e.g. np.save(path, X.astype(np.float64))")
    size = FileSystems.match([path])[0].metadata_list[0].size_in_bytes
    need = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size < need:
        raise ValueError(f"{path} is truncated: its header says shape {shape} of {dtype} ({need:,} bytes with "
                         f"the header), the file has {size:,} bytes")
    return shape, dtype, offset


def _text_info(path: str) -> Tuple[int, bytes]:
    return count_lines(read_all(path))


def count_slots(path: str, skip_header: bool = False) -> int:
    """Records a file holds: rows of a .npy, lines of a text file (less its header line with
    ``skip_header``: a header keeps no slot)."""
    if file_format(path) == "parquet":
        from pipelines.formats import parquet_rows
        return parquet_rows(path)
    if file_format(path) == "numpy":
        shape = npy_header(path)[0]
        return int(shape[0]) if len(shape) >= 1 else 1
    n = _text_info(path)[0]
    return max(0, n - 1) if skip_header else n


def slot_offsets(paths: List[str]) -> List[Tuple[str, int]]:
    """``(path, slot of its first record)`` for files taken in order."""
    out, off = [], 0
    for p in paths:
        out.append((p, off))
        off += count_slots(p)
    return out


class FileSpec(NamedTuple):
    """One input file of a job: its slot offset, the format it is parsed with, and whether
    its first line is a CSV header (skipped, no slot)."""
    path: str
    offset: int
    fmt: str
    skip_header: bool = False
    columns: Optional[tuple] = None  # a .parquet file: the columns read (names), in order


def _looks_like_header(first: bytes) -> bool:
    """A first CSV line with letters and a field that is not a number (e.g. ``lat,lon``)."""
    try:
        text = first.decode("utf-8").strip().lstrip("\ufeff")
    except UnicodeDecodeError:
        return False
    if not any(ch.isalpha() for ch in text):
        return False
    fields = [f.strip() for f in text.split(",")]
    return any(f and not _is_number(f) for f in fields)


def _is_number(f: str) -> bool:
    try:
        float(f)
        return True
    except ValueError:
        return False


def plan_files(pattern: str, fmt: Optional[str] = None, csv_header: bool = False):
    """The job's input files → ``(specs, n_slots, notes)``.

    ``fmt`` None: each file's format follows its extension (.jsonl/.json/.ndjson → json, .csv →
    csv, .npy → numpy); ``"auto"`` sniffs each text line (JSON if it starts with ``{``/``[``,
    else CSV); ``"json"``/``"csv"`` read every text file so; ``"numpy"`` needs .npy files.
    ``csv_header`` skips the first line of every file read as CSV (the .csv files under
    ``auto``); it keeps no slot, so slots count data rows from 0. ``notes`` are launch-time
    hints for the operator (a CSV file that seems to start with a header). Raises ValueError
    naming the file and the fix."""
    paths = match_files(pattern)
    specs, off, notes = [], 0, []
    for p in paths:
        ext_fmt = file_format(p)
        if ext_fmt == "parquet":  # columns become one numeric array: parsed as numpy rows
            if fmt not in (None, "numpy"):
                raise ValueError(f"--format {fmt} cannot read {p} (a Parquet file): drop --format")
            f = "numpy"
        elif fmt is None:
            f = ext_fmt
        elif fmt == "numpy" or ext_fmt == "numpy":
            if fmt != ext_fmt:
                raise ValueError(f"--format {fmt} cannot read {p} (a {'numpy' if ext_fmt == 'numpy' else 'text'} "
                                 f"file): drop --format (the default follows each file's extension)")
            f = fmt
        else:
            f = fmt
        skip = bool(csv_header) and (f == "csv" or (f == "auto" and ext_fmt == "csv"))
        try:
            if ext_fmt == "parquet":
                from pipelines.formats import parquet_rows
                n = parquet_rows(p)
            elif ext_fmt == "numpy":
                shape = npy_header(p)[0]
                n = int(shape[0]) if len(shape) >= 1 else 1
            else:
                n, first = _text_info(p)
                if skip:
                    n = max(0, n - 1)
                elif ext_fmt == "csv" and f != "json" and _looks_like_header(first):
                    notes.append(f"{p} starts with a line that is not numbers ({first[:60].decode('utf-8', 'replace')!r}): "
                                 f"if it is a header, pass --csv_header (otherwise it is dead-lettered and keeps "
                                 f"slot {off})")
        except OSError as e:
            raise ValueError(f"cannot read --input file {p}: {e.strerror or e}") from None
        specs.append(FileSpec(p, off, f, skip))
        off += n
    if csv_header and not any(sp.skip_header for sp in specs):
        raise ValueError("--csv_header: no file of --input is read as CSV (.csv files, or --format csv)")
    return specs, off, notes


class _ReadFileFn(beam.DoFn):
    def process(self, element):
        path, offset = element[0], element[1]
        skip_header = len(element) > 3 and element[3]
        fmt = file_format(path)
        if fmt == "parquet":
            from pipelines.formats import read_parquet
            arr = read_parquet(path, element[4] if len(element) > 4 else None)
            for i in range(0, arr.shape[0], NPY_CHUNK_ROWS):
                yield Record(arr[i:i + NPY_CHUNK_ROWS], offset + i)
        elif fmt == "numpy":
            arr = _load_npy(path)
            if arr.ndim != 2:  # one record: ParsePoints dead-letters a wrong shape with its reason
                yield Record(np.array(arr), offset)
                return
            for i in range(0, arr.shape[0], NPY_CHUNK_ROWS):
                # a copy per record: the file is read once, into the records (not into bytes, then an array)
                yield Record(np.array(arr[i:i + NPY_CHUNK_ROWS]), offset + i)
        else:
            lines = split_lines(read_all(path))
            if skip_header:
                lines = lines[1:]  # the header keeps no slot: slots count data rows
            for i in range(0, len(lines), LINES_BLOCK):  # blocks: ParsePoints converts their numbers at once
                yield Record(Lines(lines[i:i + LINES_BLOCK]), offset + i)


class ReadFileRecords(beam.PTransform):
    """Records of the files matched by a glob, with global slots (module docstring).

    ``ReadFileRecords(pattern)`` or ``ReadFileRecords(files=[FileSpec, …])`` (what the job
    passes: the files it checked at launch, with their formats and CSV headers)."""

    def __init__(self, pattern: Optional[str] = None, label: Optional[str] = None, files=None):
        super().__init__(label)
        if files is None:
            files = [FileSpec(p, off, file_format(p)) for p, off in slot_offsets(match_files(pattern))]
        self.files = [tuple(f) for f in files]

    def expand(self, pbegin):
        return (pbegin | "Files" >> beam.Create(self.files)
                | "ReadFiles" >> beam.ParDo(_ReadFileFn()))


class BuiltinStream(beam.PTransform):
    """The built-in public stream (:func:`dpstream.datasets.default_stream`) as numpy records."""

    def __init__(self, n: int, label: Optional[str] = None):
        super().__init__(label)
        self.n = int(n)

    def expand(self, pbegin):
        return pbegin | "Size" >> beam.Create([self.n]) | "Generate" >> beam.FlatMap(_builtin_records)


def _builtin_records(n: int):
    from dpstream.datasets import default_stream
    X = default_stream(n)[0]
    for start in range(0, n, NPY_CHUNK_ROWS):
        yield Record(X[start:start + NPY_CHUNK_ROWS], start)


HEARTBEAT_ATTRIBUTE = "dpstream_heartbeat"


def _pubsub_records(msg, id_attribute=None):
    """A message → one Record; a heartbeat (attribute ``dpstream_heartbeat``) → nothing.
    Heartbeats only wake the runner's reader so the watermark (and the tick timers)
    keep moving through input pauses; they carry no record."""
    if msg.attributes and HEARTBEAT_ATTRIBUTE in msg.attributes:
        return
    ts = None
    if getattr(msg, "publish_time", None) is not None:
        pt = msg.publish_time
        ts = pt.timestamp() if hasattr(pt, "timestamp") else float(pt)
    pid = (msg.attributes or {}).get(id_attribute) if id_attribute else None
    yield Record(msg.data, None, ts, msg.message_id or None, pid or None)


class ReadPubSubRecords(beam.PTransform):
    """Pub/Sub messages → Records: raw = the payload, ts = the publish time (a JSON
    ``"ts"`` in the payload wins), message_id = Pub/Sub's id (for deduplication), privacy_id =
    the message's ``id_attribute`` (with a privacy unit).
    Heartbeat messages are dropped here (:func:`_pubsub_records`)."""

    def __init__(self, subscription: Optional[str] = None, topic: Optional[str] = None,
                 label: Optional[str] = None, id_attribute: Optional[str] = None):
        super().__init__(label)
        self.subscription, self.topic, self.id_attribute = subscription, topic, id_attribute

    def expand(self, pbegin):
        kw = {"subscription": self.subscription} if self.subscription else {"topic": self.topic}
        return (pbegin | "ReadPubSub" >> beam.io.ReadFromPubSub(with_attributes=True, **kw)
                | "ToRecords" >> beam.FlatMap(_pubsub_records, self.id_attribute))

