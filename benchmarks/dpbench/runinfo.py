"""What ran, where: the header of every report (command, machine, versions, which dpstream code)."""
from __future__ import annotations

import datetime
import os
import platform
import subprocess


def dpstream_source() -> str:
    """Which dpstream code ran: a snapshot (a SNAPSHOT file next to the package) or a git checkout."""
    import dpstream

    pkg = os.path.dirname(os.path.abspath(dpstream.__file__))
    snap = os.path.join(os.path.dirname(pkg), "SNAPSHOT")
    if os.path.exists(snap):
        with open(snap, encoding="utf-8") as fh:
            return f"{pkg} ({fh.read().strip()})"
    try:
        head = subprocess.run(["git", "-C", pkg, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", pkg, "status", "--porcelain", "--", "."], capture_output=True,
                               text=True, timeout=10).stdout.strip()
        return f"{pkg} (git {head}{', with uncommitted changes' if dirty else ''})"
    except Exception:  # pragma: no cover
        return pkg


def run_info(argv, notes, jobs: int) -> dict:
    import numpy as np
    import sklearn

    import dpstream
    from .peers.diffprivlib_peer import unavailable

    why = unavailable()
    if why:
        dpl = why
    else:
        import diffprivlib
        dpl = diffprivlib.__version__
    try:
        load = f", load avg at start {os.getloadavg()[0]:.2f}"
    except OSError:
        load = ""
    return dict(date=datetime.datetime.now().isoformat(timespec="seconds"), dpstream_source=dpstream_source(),
                command="python benchmarks/run_benchmark.py " + " ".join(argv),
                machine=f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}{load}",
                versions=f"dpstream {getattr(dpstream, '__version__', '?')}, numpy {np.__version__}, "
                         f"scikit-learn {sklearn.__version__}, diffprivlib {dpl}",
                jobs=jobs, cores=os.cpu_count(), notes=list(notes))
