"""The ``dpstream`` command: exit codes, one-line errors, the end-of-run summary.

After a batch run (or when Ctrl-C cancels a streaming one) :func:`main` prints the operator summary and its
warnings on stderr (:mod:`pipelines.summary`); its counters are operator telemetry, never released.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import List, Optional

from pipelines.job.arguments import parse_args
from pipelines.job.description import Job
from pipelines.job.launch import launch
from pipelines.job.options import OptionError

# the options to check when a step fails; a failing clustering stage is named by its own step
_STEP_OPTIONS = {"WriteDeadLetters": "--dead_letter", "WriteReleases": "--output / --output_topic",
                 "ReadFiles": "--input", "ReadPubSub": "--input_subscription / --input_topic"}
_COMPOSITES = ("ClusterTicks",)

# set by main() for the command's own local batch run: its process ends with the run (pipelines.job.process_end)
_ENDS_PROCESS = False
# the cyclic collector's thresholds before command() raised them (pipelines.job.memory), restored by main()
# unless the run is a local batch run
_GC_BEFORE = None


def command() -> int:
    """The ``dpstream`` command and ``python -m pipelines.dp_stream_cluster``: :func:`main` on the process's
    own command line; after a batch run on this machine the process ends at once
    (:mod:`pipelines.job.process_end`) unless a profiler or tracer runs; otherwise main's exit code is
    returned to the caller's exit."""
    global _GC_BEFORE
    # raised from the start: parsing the options (Beam's included) already makes ~10⁵ lasting objects
    from pipelines.job.memory import collect_less_often
    _GC_BEFORE = collect_less_often()
    code = main()
    # a profiler or tracer (python -m cProfile, coverage) writes its data during the teardown this skips
    if _ENDS_PROCESS and sys.getprofile() is None and sys.gettrace() is None:
        from pipelines.job.process_end import end_process
        end_process(code)
    return code


def main(argv: Optional[List[str]] = None) -> int:
    """The ``dpstream`` command: exit 0 after a run (with its summary on stderr), 3 after the summary of
    a batch run that is useless (:mod:`pipelines.exit_codes`), 2 with one line on an error in the options
    or in the run (``DPSTREAM_DEBUG=1`` shows Beam's traceback), 130 on Ctrl-C of a batch run (Ctrl-C
    cancels a streaming run, prints its summary and exits 0)."""
    global _ENDS_PROCESS
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("apache_beam", "absl"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # "Deleting 1 existing files in target path matching: ": the job's own line names the files it overwrites
    logging.getLogger("apache_beam.io.filebasedsink").setLevel(logging.ERROR)
    debug = bool(os.environ.get("DPSTREAM_DEBUG"))
    quiet = _QuietBeamErrors()
    handlers = [] if debug else list(logging.getLogger().handlers)
    for h in handlers:
        h.addFilter(quiet)
    from pipelines.job.gcp_extra import QUIET_MISSING_EXTRA, quiet_missing_extra
    gcp_handlers = quiet_missing_extra(logging.getLogger().handlers)
    job = None
    try:
        job, beam_args = parse_args(argv)
        if argv is None and job.local and not job.streaming and not job.plan_only:
            # the command itself (its process's own command line; a caller's process keeps its allocator),
            # a batch run on this machine: the process ends with the run
            from pipelines.job.memory import collect_less_often, keep_freed_memory, small_pages_for_arrays
            keep_freed_memory()
            small_pages_for_arrays()
            collect_less_often()
            _ENDS_PROCESS = True
        elif _GC_BEFORE is not None:  # a stream, a remote runner, --plan_only: the collector as it was
            import gc
            gc.set_threshold(*_GC_BEFORE)
        result = launch(job, beam_args)
        if job.plan_only:
            return 0
        if getattr(result, "state", None) is not None and "RUNNING" in str(result.state):
            try:
                result.wait_until_finish()
            except KeyboardInterrupt:
                print("dpstream: interrupted: cancelling the job (up to ~30 s while the Pub/Sub reader's "
                      "pending pull returns)", file=sys.stderr, flush=True)
                result.cancel()
    except OptionError as e:
        print(f"dpstream: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        from pipelines.outputs import remove_beam_temp
        if job is not None:
            remove_beam_temp(job)  # the file sinks' half-written folders
        print("dpstream: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if debug:
            raise
        print(f"dpstream: error: {describe_failure(e, job)}", file=sys.stderr)
        return 2
    finally:
        for h in handlers:
            h.removeFilter(quiet)
        for h in gcp_handlers:
            h.removeFilter(QUIET_MISSING_EXTRA)
    from pipelines.exit_codes import EXIT_OK, EXIT_USELESS, useless_reason
    why = useless_reason(job, print_summary(job, result))
    if why:
        print(f"dpstream: exit {EXIT_USELESS}: the run is useless: {why}", file=sys.stderr)
        return EXIT_USELESS
    return EXIT_OK


def describe_failure(exc: BaseException, job: Optional[Job] = None) -> str:
    """One line for a failure inside the pipeline: what failed, in which step, the option to check."""
    import re

    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    m = re.search(r"\[while running '([^']+)'\]", text)
    step = m.group(1) if m else None
    msg = re.sub(r"\s*\[while running '[^']+'\]", "", first).strip()
    if len(msg) > 300:
        msg = msg[:300] + "…"
    out = f"the job failed: {msg}"
    if step:
        parts = step.split("/")
        top = parts[1] if parts[0] in _COMPOSITES and len(parts) > 1 else parts[0]
        out += f" (in step {top})"
        opt = next((o for k, o in _STEP_OPTIONS.items() if top.startswith(k)), None)
        if opt:
            out += f"; check {opt}"
    return out + "; set DPSTREAM_DEBUG=1 for the full traceback"


class _QuietBeamErrors(logging.Filter):
    """Beam logs a failing step's traceback at ERROR before raising; ``main`` prints one line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name.startswith("apache_beam") and record.levelno >= logging.ERROR)


def operator_counts(result) -> dict:
    """The job's exact ``dpstream`` counters of a finished (or cancelled) run, as a dict:
    ``read``, ``valid``, ``dead_letter``, ``dead_letter_<reason>``, ``outside_horizon``,
    ``no_clock``, ``after_deadline``, ``arrived_after_deadline``, ``after_close``,
    ``redeliveries_dropped``, ``after_dedup_ttl``, ``points_processed``, ``clipped``,
    ``ticks_released``, …  Operator telemetry: never publish them with the releases."""
    from pipelines.summary import operator_counts as counts
    return counts(result)


def print_summary(job: Job, result, file=None) -> dict:
    """Print the end-of-run summary and warnings (stderr by default); returns the counts."""
    from pipelines.summary import report
    try:
        counts = operator_counts(result)
    except Exception as e:  # a runner without metrics: say so, never fail the run for it
        print(f"dpstream: no run summary: the runner's metrics are unavailable ({type(e).__name__})",
              file=file or sys.stderr)
        return {}
    for line in report(job, counts):
        print(line, file=file or sys.stderr)
    return counts
