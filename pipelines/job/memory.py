"""The command's process keeps the memory it frees, for a batch run on a local runner.

The in-process runner moves a run's points as large buffers (each message, each shuffle's stream, each
state written and read), and glibc serves every buffer above its mmap threshold (at most 32 MB) with a
fresh mapping that it unmaps on free: the kernel zeroes every page of it again on first touch. Measured on
10⁵ × 384 float32 points (one worker, the job alone): 3.3–4.0 s of system time in a 9 s job; with every
allocation served from the heap and the heap's top never given back, 1.3–1.5 s, the releases unchanged
(an allocator setting: no number the job computes depends on it), the peak memory ~20% higher (1.7 → 2.1 GB:
freed buffers are reused, not returned). So :func:`keep_freed_memory` is applied by the command
(``main()`` reading its process's own command line) for a batch run on a local runner, whose process ends
with the run; a stream, a remote runner's workers and a process that calls ``main(argv)`` or ``run(argv)``
(tests, notebooks) keep glibc's defaults.

The same run asks numpy not to mark its large arrays for transparent huge pages (:func:`small_pages_for_arrays`;
numpy does it for every array of 4 MB or more where the kernel's THP mode is ``madvise``): each such array's
first touch then had the kernel find (compact memory for) and zero 2 MB pages, whose cost varied with what
else ran on the machine. Measured on 10⁵ × 384 float32 points, runs interleaved on a loaded 2-core machine:
the job's CPU 4.6–6.1 s (system time 0.9–2.2 s) with huge pages, 4.76–4.80 s (1.1–1.2 s) without, though the
minor page faults rise from ≈ 340k to ≈ 490k (4 kB pages instead of 2 MB ones).

The same run also collects cyclic garbage less often (:func:`collect_less_often`): Python's collector runs
every 700 net new container objects, and the imports and the graph of a run (Beam, scikit-learn, the runner's
protobufs: ~10⁶ objects that all live to the end) trigger one full collection after another, each walking
every object made so far. The command raises the thresholds before it parses its options and keeps them
for a local batch run (a stream, a remote runner get the defaults back). Measured on 10⁵ × 384 float32
points with ``gc.callbacks``: 580 / 53 / 4 collections of the three generations, 0.53 s of CPU, with the
defaults; 8 young ones, 0.17 s, with :data:`GC_THRESHOLDS` (nothing the job computes depends on when garbage
is collected).
"""
from __future__ import annotations

import ctypes
import gc
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_MAX = -4
_KEEP = 2 ** 31 - 1  # mallopt takes an int: the heap's top is given back only past 2 GB free


def keep_freed_memory() -> bool:
    """Serve every allocation of this process from glibc's heap (``M_MMAP_MAX = 0``) and keep the heap's
    freed top (``M_TRIM_THRESHOLD``); True if applied, False where there is no glibc (nothing changes)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, _KEEP))


# a young collection every 50,000 net new containers (700 by default), an older one every 20 of those
GC_THRESHOLDS = (50_000, 20, 20)


def collect_less_often() -> tuple:
    """Raise the cyclic collector's thresholds (:data:`GC_THRESHOLDS`): the garbage a run makes is still
    collected, in fewer, larger passes. Returns the thresholds before (``gc.set_threshold(*them)`` restores)."""
    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    return before


def small_pages_for_arrays() -> bool:
    """numpy stops asking for transparent huge pages for its large arrays (what ``NUMPY_MADVISE_HUGEPAGE=0``
    does when set before numpy is imported); True if numpy has the switch."""
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy < 2
        from numpy.core import multiarray
    switch = getattr(multiarray, "_set_madvise_hugepage", None)
    if switch is None:
        return False
    switch(False)
    return True
