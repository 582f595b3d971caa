"""Refuse a master seed already used on other data (P16).

The same noise on two different inputs D and D' releases f(D) − f(D') exactly.
Each run with ``--seed_file`` records the seed's fingerprint (never released: seed files hold 256 bits
of key material, so it cannot be searched, and it stays with the operator) with the
identity of the run (its input and its engine configuration) in a registry, a
JSON-lines file (local path or any Beam filesystem URL; default
``$DPSTREAM_SEED_REGISTRY`` or ``~/.dpstream/seed_registry.jsonl``). A later run
with the same fingerprint is refused unless it is the *same* bounded run again
(the same file contents parsed the same way, the same configuration),
which releases the same values and so reveals nothing new. A stream is never
the same run twice: reusing a seed on a stream is always refused.

Runs without ``--seed_file`` draw a fresh seed from OS entropy and need no entry.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Optional

from apache_beam.io.filesystems import FileSystems

from dpstream import algorithm_version

DEFAULT_PATH = os.path.join("~", ".dpstream", "seed_registry.jsonl")


class SeedReused(ValueError):
    pass


def default_path() -> str:
    return os.environ.get("DPSTREAM_SEED_REGISTRY") or os.path.expanduser(DEFAULT_PATH)


_CHUNK = 1 << 20


def content_id(path: str) -> str:
    """What a file holds, never where or when: an in-place edit that keeps the size and the
    modification time (``cp -p``, ``rsync -t``, ``touch -r``) still changes it.

    On Cloud Storage the object's stored CRC32C (read from the metadata, no download): it changes with
    any accidental edit, which is what the registry guards against; it is not meant to resist a forged
    collision (whoever can forge one also holds the seed). Everywhere else the SHA-256 of the bytes,
    streamed a megabyte at a time."""
    if path.startswith("gs://"):
        return f"gcs-crc32c:{FileSystems.checksum(path)}"
    h = hashlib.sha256()
    with FileSystems.open(path, compression_type="uncompressed") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    return f"sha256:{h.hexdigest()}"


def run_identity(job, cfg) -> dict:
    """What makes two runs 'the same run': the input's content and how it is parsed, and the engine
    configuration."""
    if job.source == "files":
        from pipelines.sources import match_files
        inp = {"files": [[path, content_id(path)] for path in match_files(job.input)]}
        # how the files are parsed changes which records are points and which slot each has
        if getattr(job, "fmt", None) is not None:
            inp["format"] = job.fmt
        if getattr(job, "csv_header", False):
            inp["csv_header"] = True
        # the reading options choose which fields make a point (and its time): other columns of the same
        # file are other data
        reading = {"columns": getattr(job, "columns", None), "csv_columns": getattr(job, "csv_columns", None),
                   "delimiter": getattr(job, "delimiter", ","), "ts_unit": getattr(job, "ts_unit", "s"),
                   "file_columns": [getattr(sp, "columns", None) for sp in (getattr(job, "files", None) or [])],
                   "privacy_unit": getattr(job, "unit", None)}
        if reading != {"columns": None, "csv_columns": None, "delimiter": ",", "ts_unit": "s",
                       "file_columns": [None] * len(reading["file_columns"]), "privacy_unit": None}:
            inp["reading"] = reading  # (absent when every option has its default: earlier entries still match)
    elif job.source == "builtin":
        inp = {"builtin_n": job.builtin_n}
    else:
        inp = {"stream": job.subscription or job.topic}
    clock = {"clock": job.clock, "tick_size": job.tick_size, "tick_seconds": job.tick_seconds,
             "t_start": job.t_start}
    # the code's version too: a new version may release something else for the same config and input,
    # and two different releases under one seed's noise give their difference exactly
    ident = {"input": inp, "clock": clock, "config": cfg.to_dict(), "algorithm": algorithm_version.ALGORITHM_VERSION}
    ident["digest"] = hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:32]
    return ident


def _read(path: str) -> list:
    if "://" not in path and not os.path.exists(path):
        return []
    if "://" in path and not FileSystems.exists(path):
        return []
    with FileSystems.open(path, compression_type="uncompressed") as fh:
        return [json.loads(line) for line in fh.read().decode("utf-8").splitlines() if line.strip()]


def _write(path: str, entries: list) -> None:
    if "://" not in path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    data = "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries).encode("utf-8")
    with FileSystems.create(path, compression_type="uncompressed") as fh:
        fh.write(data)


def check_and_record(fingerprint: str, identity: dict, streaming: bool, path: Optional[str] = None) -> str:
    """Raise :class:`SeedReused` if this seed was used on another run; otherwise record it."""
    path = path or default_path()
    entries = _read(path)
    for e in entries:
        if e["seed_fingerprint"] != fingerprint:
            continue
        if streaming or e.get("streaming") or e["run"] != identity["digest"]:
            raise SeedReused(
                f"the seed in --seed_file was already used on "
                f"{'a stream' if e.get('streaming') else 'another input or configuration'} at "
                f"{e.get('time', '?')} (registry {path}); reusing it would release the difference of the two "
                f"runs exactly: make a new seed (head -c 32 /dev/urandom > FILE)")
        return path  # the same bounded run again: same releases, nothing new
    entries.append({"seed_fingerprint": fingerprint, "run": identity["digest"], "streaming": bool(streaming),
                    "input": identity["input"], "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    _write(path, entries)
    return path
