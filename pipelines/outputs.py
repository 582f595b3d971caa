"""Output files written whole or not at all, and where the operator's NON-PRIVATE files go.

A file is written under a temporary name in its own directory and renamed into place
(``os.replace`` is atomic on one filesystem): Ctrl-C leaves either the old file or the new
one, never half of one. The operator's NON-PRIVATE files — the dead letters (raw records) and
the evaluation of ``--report`` (it reads and draws the raw points) — go to ``<output>/non_private/``
by default, never beside the releases, so copying the release folder's top-level files ships no raw
data (an explicit ``--dead_letter`` path is the operator's choice).
"""
from __future__ import annotations

import os
import tempfile
from typing import Callable

NON_PRIVATE_DIR = "non_private"
NON_PRIVATE_FILES = ("evaluation.json", "report.png")


def non_private_dir(output: str) -> str:
    return os.path.join(output, NON_PRIVATE_DIR)


def write_atomic(path: str, write: Callable[[str], None]) -> None:
    """``write(tmp_path)`` then rename ``tmp_path`` to ``path``; the temporary file is removed on
    any failure (including KeyboardInterrupt)."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_text_atomic(path: str, text: str) -> None:
    def w(tmp):
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
    write_atomic(path, w)


STALE_REPORT_FILES = ("centers.json", "privacy_plan.md")


def remove_stale_evaluation(output: str) -> None:
    """An earlier run's report files would describe other releases: its NON-PRIVATE evaluation (in
    ``non_private/``, or beside the releases where older versions wrote it), its ``centers.json`` and
    ``privacy_plan.md`` are removed at launch, whether or not this run writes a report."""
    for base in (non_private_dir(output), output):
        for name in NON_PRIVATE_FILES:
            p = os.path.join(base, name)
            if os.path.isfile(p):
                os.remove(p)
    for name in STALE_REPORT_FILES:
        p = os.path.join(output, name)
        if os.path.isfile(p):
            os.remove(p)


def remove_beam_temp(job) -> list:
    """Remove the ``beam-temp-*`` folders Beam's file sinks leave in the local output places when a
    batch run is interrupted (they are removed by the sink's finalisation, which Ctrl-C skips).
    Returns the folders removed."""
    import glob
    import shutil

    places = set()
    for p in (getattr(job, "output", None), os.path.dirname(os.path.abspath(job.dead_letter))
              if _local(getattr(job, "dead_letter", None)) else None):
        if p and _local(p) and os.path.isdir(p):
            places.add(p)
    gone = []
    for d in sorted(places):
        for t in glob.glob(os.path.join(d, "beam-temp-*")):
            shutil.rmtree(t, ignore_errors=True)
            gone.append(t)
    return gone


def _local(path) -> bool:
    return bool(path) and "://" not in path and not str(path).startswith("projects/")


REMOTE_PROBE_SECONDS = 20.0


def check_remote(path: str, what: str, timeout: float = REMOTE_PROBE_SECONDS) -> None:
    """Fail fast, with one line, when a remote output (``gs://…``) cannot be reached: the storage
    client would otherwise retry for minutes before Beam's own error. Raises ValueError."""
    import concurrent.futures

    from apache_beam.io.filesystems import FileSystems

    def probe():
        FileSystems.exists(path.rstrip("/") + "/")

    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        pool.submit(probe).result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        raise ValueError(f"cannot reach {what} {path} within {timeout:g} s: check the credentials "
                         f"(gcloud auth application-default login) and the bucket") from None
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ValueError(f"cannot reach {what} {path}: {first}") from None
    finally:
        pool.shutdown(wait=False)
