"""Launching a parsed job: the secret seed, the pre-flight checks, the runner's options, the run.

The master seed is a secret: the workers read it from ``--seed_file`` (a local path or any Beam filesystem
URL such as gs://…); it is never an option value, a template parameter or a log line. Without
``--seed_file`` a local run draws 256 bits of OS entropy into a private temporary file; a remote runner
needs ``--seed_file`` (its workers cannot read the launcher's temporary files; :mod:`pipelines.job.arguments`
refuses it). A seed file is checked here, at launch, and recorded in the seed registry
(:mod:`pipelines.seed_registry`), which refuses a seed used before on other data.
"""
from __future__ import annotations

import atexit
import logging
import math
import os
import shutil
import sys
import tempfile
from typing import List

from pipelines.job.description import Job
from pipelines.job.graph import build
from pipelines.job.options import OptionError
from pipelines.job.preflight import check_outputs

log = logging.getLogger("dpstream")


def launch(job: Job, beam_args: List[str], wait: bool = True):
    """Build and run a parsed job (``run`` without the parsing). With ``--plan_only`` it prints
    the plan (:mod:`dpstream.planning`) on stdout and returns its text instead of a result."""
    if job.plan_only:
        from dpstream.planning import plan_text
        text = plan_text(job.cfg, points_per_tick=job.tick_size)
        print(text)
        return text
    from pipelines.job.gcp_extra import check_job
    check_job(job)  # Dataflow or gs:// without Beam's Google Cloud extra: what to install, not Beam's error
    import apache_beam as beam

    seed_path = job.seed_file or private_seed_file()
    if job.seed_file:
        check_seed(job)
    check_outputs(job)
    p = beam.Pipeline(options=pipeline_options(job, beam_args))
    skip_prism(p.runner)
    build(p, job, seed_path)
    announce(job)
    tmp = tempfile.mkdtemp(prefix="dpstream-beam-")
    atexit.register(shutil.rmtree, tmp, True)  # also after Ctrl-C
    result = run_with_tempdir(p, tmp)
    if wait and not job.streaming:
        result.wait_until_finish()
        shutil.rmtree(tmp, ignore_errors=True)
        if job.report:
            from pipelines.report import write_report
            write_report(job)
    else:
        atexit.register(shutil.rmtree, tmp, True)
    return result


def skip_prism(runner) -> bool:
    """The DirectRunner runs the job on Beam's in-process runners (the FnApiRunner for a batch, the
    BundleBasedDirectRunner where that cannot), without first trying the Prism runner; True if it applied.

    Beam's DirectRunner first tries Prism, a Go binary it downloads from GitHub on first use: offline the
    download fails and it falls back (~0.13 s of a run spent starting a gRPC worker pool and failing the
    name lookup, and two server threads idling to the end of the process); online the job would run on
    Prism, a runner the local-runner workarounds (:mod:`pipelines.local_runner`) and the job's tests were
    not measured on. ``is_interactive()`` is the DirectRunner's own switch (Beam's interactive runner sets
    it) whose one effect is to skip Prism; Beam's choice between its in-process runners is unchanged."""
    from apache_beam.runners.direct.direct_runner import SwitchingDirectRunner

    if isinstance(runner, SwitchingDirectRunner) and callable(getattr(runner, "is_interactive", None)):
        runner.is_interactive()
        return True
    return False


def private_seed_file() -> str:
    """OS entropy in a file only this user can read, removed at exit (local runs)."""
    d = tempfile.mkdtemp(prefix="dpstream-seed-")
    path = os.path.join(d, "seed")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(os.urandom(32).hex().encode())
    atexit.register(shutil.rmtree, d, True)
    return path


def check_seed(job: Job) -> None:
    """Read ``--seed_file`` here (fail at launch, not on a worker) and record its fingerprint in the
    seed registry, which refuses a seed used before on another input or configuration."""
    from dpstream.noise import fingerprint
    from pipelines.seed_registry import SeedReused, check_and_record, run_identity
    from transforms.cluster import load_seed
    try:
        seed = load_seed(job.seed_file)
    except (OSError, ValueError) as e:
        raise OptionError(f"--seed_file: {e}") from None
    try:
        check_and_record(fingerprint(seed), run_identity(job, job.cfg), job.streaming, job.seed_registry)
    except SeedReused as e:
        raise OptionError(str(e)) from None
    del seed


def pipeline_options(job: Job, beam_args: List[str]):
    """Beam's options: the user's, the job's runner unless they named one, streaming for a stream."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    args = list(beam_args)
    if not any(a == "--runner" or a.startswith("--runner=") for a in args):
        args.append(f"--runner={job.runner}")
    opts = PipelineOptions(args)
    if job.streaming:
        opts.view_as(StandardOptions).streaming = True
    return opts


def announce(job: Job) -> None:
    """The launch's log line and the operator's warnings about the input, before the run."""
    log.info("dpstream: %s input, %s clock, T=%d ticks × %s run(s), k=%d, d=%d, epsilon=%g, delta=%g, runner %s",
             job.source, job.clock, job.horizon_ticks, "unbounded" if job.runs is None else job.runs, job.k,
             job.dim, job.epsilon, job.delta, job.runner)
    for note in job.notes or []:
        warn(note)
    if job.clock == "position" and job.n_slots is not None and job.total_ticks is not None \
            and job.n_slots > job.total_ticks * job.tick_size:
        from pipelines.summary import horizon_options
        cap = job.total_ticks * job.tick_size
        warn(f"the input holds {job.n_slots:,} records but {horizon_options(job)} × --tick_size "
             f"{job.tick_size} = {cap:,} slots: the records from slot {cap:,} on will be dropped (the slot count "
             f"is public: ceil({job.n_slots:,} / {job.tick_size}) = {math.ceil(job.n_slots / job.tick_size)} ticks "
             f"would hold them all)")
    if job.end_tick is not None:
        log.info("dpstream: the input ends at tick %d of %d: declared the stream's end (--end_at_input_end), "
                 "every pending block is released there", job.end_tick, job.total_ticks)
    if job.clock == "event_time":
        from pipelines.summary import horizon_span
        log.info("dpstream: event-time horizon: ticks 1..%s of %g s span %s%s",
                 "∞" if job.total_ticks is None else job.total_ticks,
                 job.tick_seconds, horizon_span(job), "" if job.t_start_given else " (from the launch time)")


def warn(message: str) -> None:
    """An operator warning on stderr (launch-time checks; the end-of-run summary)."""
    print(f"dpstream: warning: {message}", file=sys.stderr, flush=True)


def run_with_tempdir(p, tmp: str):
    """``p.run()`` with the process's temporary directory pointed at ``tmp`` (removed by the caller):
    the DirectRunner first tries the Prism runner, whose job server leaves an empty
    ``beam-temp*`` folder in the temporary directory when its binary cannot be fetched."""
    old = tempfile.tempdir
    tempfile.tempdir = tmp
    try:
        return p.run()
    finally:
        tempfile.tempdir = old
