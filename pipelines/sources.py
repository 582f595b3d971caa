"""Sources of the main job: file globs (.npy, .csv, .jsonl), Pub/Sub, the built-in stream.

Every source emits :class:`transforms.parse.Record` elements. A bounded source
assigns each record its **slot** (its raw line or row index in the whole input,
files taken in sorted name order) *before* parsing, so a malformed record keeps
its slot and no other record changes tick (privacy review finding 4a).
"""
from __future__ import annotations

import io
import math
import os
from typing import List, Optional, Tuple

import numpy as np

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms.parse import Record

FILE_FORMATS = {".npy": "numpy", ".csv": "csv", ".jsonl": "json", ".json": "json", ".ndjson": "json"}
NPY_CHUNK_ROWS = 8192


def file_format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in FILE_FORMATS:
        raise ValueError(f"cannot read {path}: use .npy, .csv or .jsonl files")
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


def _read_all(path: str) -> bytes:
    with FileSystems.open(path, compression_type="uncompressed") as fh:
        return fh.read()


def _lines(data: bytes) -> List[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the final newline ends the last line; it does not start an empty one
    return [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]


def count_slots(path: str) -> int:
    """Records a file holds: rows of a .npy, lines of a text file."""
    if file_format(path) == "numpy":
        with FileSystems.open(path, compression_type="uncompressed") as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, _ = read(fh)
        return int(shape[0]) if len(shape) >= 1 else 1
    return len(_lines(_read_all(path)))


def slot_offsets(paths: List[str]) -> List[Tuple[str, int]]:
    """``(path, slot of its first record)`` for files taken in order."""
    out, off = [], 0
    for p in paths:
        out.append((p, off))
        off += count_slots(p)
    return out


class _ReadFileFn(beam.DoFn):
    def process(self, element):
        path, offset = element
        fmt = file_format(path)
        if fmt == "numpy":
            arr = np.load(io.BytesIO(_read_all(path)), allow_pickle=False)
            if arr.ndim != 2:  # one record: ParsePoints dead-letters a wrong shape with its reason
                yield Record(arr, offset)
                return
            for i in range(0, arr.shape[0], NPY_CHUNK_ROWS):
                yield Record(arr[i:i + NPY_CHUNK_ROWS], offset + i)
        else:
            for i, line in enumerate(_lines(_read_all(path))):
                yield Record(line, offset + i)


class ReadFileRecords(beam.PTransform):
    """Records of the files matched by a glob, with global slots (module docstring)."""

    def __init__(self, pattern: str, label: Optional[str] = None):
        super().__init__(label)
        self.files = slot_offsets(match_files(pattern))

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


def _pubsub_records(msg):
    """A message → one Record; a heartbeat (attribute ``dpstream_heartbeat``) → nothing.
    Heartbeats only wake the runner's reader so the watermark (and the tick timers)
    keep moving through input pauses; they carry no record."""
    if msg.attributes and HEARTBEAT_ATTRIBUTE in msg.attributes:
        return
    ts = None
    if getattr(msg, "publish_time", None) is not None:
        pt = msg.publish_time
        ts = pt.timestamp() if hasattr(pt, "timestamp") else float(pt)
    yield Record(msg.data, None, ts, msg.message_id or None)


class ReadPubSubRecords(beam.PTransform):
    """Pub/Sub messages → Records: raw = the payload, ts = the publish time (a JSON
    ``"ts"`` in the payload wins), message_id = Pub/Sub's id (for deduplication).
    Heartbeat messages are dropped here (:func:`_pubsub_records`)."""

    def __init__(self, subscription: Optional[str] = None, topic: Optional[str] = None,
                 label: Optional[str] = None):
        super().__init__(label)
        self.subscription, self.topic = subscription, topic

    def expand(self, pbegin):
        kw = {"subscription": self.subscription} if self.subscription else {"topic": self.topic}
        return (pbegin | "ReadPubSub" >> beam.io.ReadFromPubSub(with_attributes=True, **kw)
                | "ToRecords" >> beam.FlatMap(_pubsub_records))


def builtin_ticks(n: int, tick_size: int) -> int:
    return max(1, math.ceil(n / tick_size))
