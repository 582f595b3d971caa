"""The child stages that run Beam pipelines: the empty pipeline, the floors (read; read + parse; + ticks;
the job without its sinks), the job, and the profiled job. Each returns its clocks and peak RSS."""
from __future__ import annotations

import shutil

from .common import _Clock, _counter, _job_argv, _options, _peak_rss_mb, _quiet_beam
from .profile import summarise_profile


def stage_empty(ctx):
    """An empty DirectRunner pipeline: start-up and teardown cost."""
    _quiet_beam()
    import apache_beam as beam
    with _Clock() as c:
        p = beam.Pipeline(options=_options())
        _ = p | beam.Create([0]) | beam.Map(lambda _: None)
        p.run().wait_until_finish()
    return {"wall": c.wall, "cpu": c.cpu, "cpu_children": c.cpu_children, "rss_mb": _peak_rss_mb()}


def stage_floor_read(ctx):
    """ReadFileRecords → count rows (a counter): reading only."""
    _quiet_beam()
    import apache_beam as beam
    from apache_beam.metrics import Metrics

    from pipelines.sources import ReadFileRecords

    rows = Metrics.counter("dpstream", "bench_rows")

    def count(rec):
        rows.inc(int(rec.raw.shape[0]) if rec.raw.ndim == 2 else 1)

    with _Clock() as c:
        p = beam.Pipeline(options=_options())
        _ = p | "ReadFiles" >> ReadFileRecords(ctx["data_glob"]) | "CountRows" >> beam.Map(count)
        result = p.run()
        result.wait_until_finish()
    return {"wall": c.wall, "cpu": c.cpu, "cpu_children": c.cpu_children, "rss_mb": _peak_rss_mb(),
            "rows": _counter(result, "bench_rows")}


def stage_floor_parse(ctx):
    """ReadFileRecords → ParsePoints(batch_arrays=True) → Map(None): reading + the job's vectorised parse
    (one ParsedBatch per numpy record) of the same records, writing nothing."""
    _quiet_beam()
    import apache_beam as beam

    from pipelines.sources import ReadFileRecords
    from transforms.parse import ParsePoints

    with _Clock() as c:
        p = beam.Pipeline(options=_options())
        parsed = (p | "ReadFiles" >> ReadFileRecords(ctx["data_glob"])
                  | "ParsePoints" >> ParsePoints(ctx["d"], "auto", batch_arrays=True))
        _ = parsed.points | "Drop" >> beam.Map(lambda _: None)
        result = p.run()
        result.wait_until_finish()
    return {"wall": c.wall, "cpu": c.cpu, "cpu_children": c.cpu_children, "rss_mb": _peak_rss_mb(),
            "rows": _counter(result, "valid")}


def stage_floor_ticks(ctx):
    """… → ParsePoints(batch_arrays=True) → BatchIntoTicks (the job's, keep_order_keys) → Map(None)."""
    _quiet_beam()
    import apache_beam as beam

    from pipelines import dp_stream_cluster as jm
    from pipelines.sources import ReadFileRecords
    from transforms.parse import ParsePoints

    job, _ = jm.parse_args(_job_argv(ctx, ctx["data_glob"], ctx["work"] + "/unused_out", ctx["n"]))
    with _Clock() as c:
        p = beam.Pipeline(options=_options())
        parsed = (p | "ReadFiles" >> ReadFileRecords(ctx["data_glob"])
                  | "ParsePoints" >> ParsePoints(ctx["d"], "auto", batch_arrays=True))
        _ = parsed.points | "BatchIntoTicks" >> jm.batch_into_ticks(job) | "Drop" >> beam.Map(lambda _: None)
        result = p.run()
        result.wait_until_finish()
    return {"wall": c.wall, "cpu": c.cpu, "cpu_children": c.cpu_children, "rss_mb": _peak_rss_mb(),
            "rows": _counter(result, "ticked")}


def stage_floor_cluster(ctx):
    """The job itself (``run([...])``) with its sinks (``pipelines.sinks.WriteJsonLines``) replaced by
    ``Map(None)``: everything but WriteReleases / WriteDeadLetters, whatever stages the job has."""
    _quiet_beam()
    import apache_beam as beam

    import pipelines.sinks as sinks
    from pipelines import dp_stream_cluster as jm

    class _NoSink(beam.PTransform):
        def __init__(self, *a, **kw):
            super().__init__(kw.get("label"))

        def expand(self, pcoll):
            return pcoll | "Drop" >> beam.Map(lambda _: None)

    # the job's top-level stages, from a graph built (not run) with the real sinks
    job, _ = jm.parse_args(_job_argv(ctx, ctx["data_glob"], ctx["work"] + "/unused_out", ctx["n"]))
    p = beam.Pipeline(options=_options())
    jm.build(p, job, ctx["seed_file"])
    labels = [t.full_label for t in p.transforms_stack[0].parts]

    real = sinks.WriteJsonLines
    sinks.WriteJsonLines = _NoSink
    try:
        argv, result, state, c = _run_job(ctx, ctx["data_glob"], ctx["n"], ctx["work"] + "/no_sink_out")
    finally:
        sinks.WriteJsonLines = real
    return {"wall": c.wall, "cpu": c.cpu, "cpu_children": c.cpu_children, "rss_mb": _peak_rss_mb(),
            "state": state, "rows": _counter(result, "points_processed"), "job_stages": labels}


def _run_job(ctx, data_glob, n, out_dir, profile_path=None, seed_file=None):
    _quiet_beam()
    from pipelines import dp_stream_cluster as jm

    shutil.rmtree(out_dir, ignore_errors=True)
    argv = _job_argv(ctx, data_glob, out_dir, n, seed_file)
    prof = None
    if profile_path:
        import cProfile
        prof = cProfile.Profile()
    with _Clock() as c:
        if prof:
            prof.enable()
        result = jm.run(argv)
        if prof:
            prof.disable()
    state = str(result.state)
    if prof:
        prof.dump_stats(profile_path)
    return argv, result, state, c


def stage_job(ctx):
    out_dir = ctx["work"] + "/job_out"
    argv, result, state, c = _run_job(ctx, ctx["data_glob"], ctx["n"], out_dir)
    return {"wall": c.wall, "cpu": c.cpu, "cpu_children": c.cpu_children, "rss_mb": _peak_rss_mb(),
            "state": state, "argv": argv, "releases": out_dir + "/releases.jsonl",
            "rows": _counter(result, "points_processed"), "ticks_released": _counter(result, "ticks_released")}


def stage_job_profile(ctx):
    out_dir = ctx["work"] + "/job_profile_out"
    path = ctx["work"] + "/job.prof"
    # another input: its own seed (the job refuses a seed already used on other data)
    argv, result, state, c = _run_job(ctx, ctx["profile_glob"], ctx["profile_n"], out_dir, profile_path=path,
                                      seed_file=ctx["profile_seed_file"])
    return {"wall": c.wall, "cpu": c.cpu, "state": state, "argv": argv, "n": ctx["profile_n"],
            "summary": summarise_profile(path, c.cpu)}

