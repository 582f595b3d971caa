"""The ``dpstream`` command's exit codes, and when a finished batch run counts as useless.

A scheduler (Airflow, cron, a Dataflow launcher) sees only the exit code, so a batch run whose
releases say nothing about the data must not exit 0, even though every release was written:

    0    the run finished and its releases reflect the data
    2    an error in the options, the paths or the running pipeline (one line on stderr)
    3    the run finished but is useless: nothing was read, nothing reached the clusterer, or more
         than ``--max_dead_letter_fraction`` of the records read were dead-lettered (the summary
         and its warnings are printed first; the releases are written and remain DP)
    130  interrupted (Ctrl-C) during a batch run

A streaming run stopped with Ctrl-C exits 0 after its summary: its counts cover a window the
operator chose to end. The library (``DPStreamClusterer``) keeps raising or warning as before.
The code is a function of exact counts: operator telemetry for the scheduler, like the summary, never
something to pass on with the releases.
"""
from __future__ import annotations

from typing import Dict, Optional

EXIT_OK = 0
EXIT_ERROR = 2
EXIT_USELESS = 3
EXIT_INTERRUPTED = 130
DEFAULT_MAX_DEAD_LETTER_FRACTION = 0.5


def useless_reason(job, counts: Dict[str, int]) -> Optional[str]:
    """Why a finished batch run is useless, or None. ``counts``: :func:`pipelines.summary.operator_counts`."""
    if getattr(job, "streaming", False) or not counts:
        return None  # a runner without metrics: no evidence either way
    read, dead = counts.get("read", 0), counts.get("dead_letter", 0)
    limit = getattr(job, "max_dead_letter_fraction", DEFAULT_MAX_DEAD_LETTER_FRACTION)
    if read == 0:
        return "nothing was read"
    if counts.get("points_processed", 0) == 0:
        return "no record reached the clusterer: every release holds noise only"
    if dead > limit * read:
        return (f"{dead:,} of {read:,} records ({100.0 * dead / read:.0f}%) were dead-lettered, more than "
                f"--max_dead_letter_fraction {limit:g}")
    return None
