"""Small helpers shared by the harness and the reports: logging, threads, JSON."""
from __future__ import annotations

import math
import os
import time

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS")
T0 = time.time()


def limit_threads() -> None:
    """One BLAS/OpenMP thread: call before numpy is imported (CPU time is then the time on one core)."""
    for v in THREAD_VARS:
        os.environ.setdefault(v, "1")


def parse_list(s, conv=str) -> list:
    """A comma list of the command line (``"a, b,"`` → ``["a", "b"]``)."""
    return [conv(x.strip()) for x in s.split(",") if x.strip()]


def log(msg: str) -> None:
    print(f"[{time.time() - T0:8.1f}s] {msg}", flush=True)


def loadavg():
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def rounded(o, sig=7):
    """Floats to `sig` significant digits (recursively), for compact JSON."""
    if isinstance(o, float):
        return float(f"{o:.{sig}g}") if math.isfinite(o) else o
    if isinstance(o, dict):
        return {k: rounded(v, sig) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [rounded(v, sig) for v in o]
    return o


def json_default(o):
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(type(o))
