"""A file's bytes and lines, through Beam's filesystems (local paths and ``gs://``).

A leaf module: the sources, the format readers and the report all read files the same way
without importing each other."""
from __future__ import annotations

from typing import List

from apache_beam.io.filesystems import FileSystems


def read_all(path: str) -> bytes:
    with FileSystems.open(path, compression_type="uncompressed") as fh:
        return fh.read()


def split_lines(data: bytes) -> List[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the final newline ends the last line; it does not start an empty one
    return [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]
