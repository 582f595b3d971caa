#!/usr/bin/env python
"""Throughput of the Beam job (``pipelines.dp_stream_cluster``) against its floors and the library engine.

    .venv/bin/python benchmarks/beam_benchmark.py [--n 1000000] [--d 10] [--k 10] [--tick_size 1000]
                                                 [--out benchmarks/results] [--repeats 1]

One script, on one data set (``dpstream.datasets.gaussian_mixture(n, d, k, std=1, box=10, seed=0)``,
saved as one .npy file in a temporary directory; public radius Λ = (box + 5·std)·√d; a temporary
seed file holding the hex text of 32 random bytes):

* **floors** — no-op Beam pipelines on the same runner (DirectRunner) reading the same input:
  ``ReadFileRecords → count rows`` (read only) and ``ReadFileRecords → ParsePoints(batch_arrays=True) →
  Map(None)`` (read + the job's vectorised parse: one ``ParsedBatch`` per 8192-row record; the floor the job
  is judged against); also ``… → BatchIntoTicks → Map(None)``, the job with its sinks replaced by
  ``Map(None)`` and an empty pipeline (start-up cost), nested stages that split the job's time by stage;
* **job** — ``pipelines.dp_stream_cluster.run([...])`` with ``horizon_ticks = ceil(n / tick_size)``;
* **engine** — ``dpstream.engine.Engine(engine_config(job), seed)`` stepped tick by tick on the same
  rows; every one of its releases is compared (JSON round trip) with the job's ``releases.jsonl``;
* **micro** — the job's own Python code per element, without Beam, on the elements its stages see:
  ``ParsePointsFn(batch_arrays=True).process`` per numpy record, ``_AssignTicksFn`` on the ``ParsedBatch``
  elements (+ its flushes), ``merge_partials`` per tick, ``_LevelUpdatesFn.process`` per tick batch, each
  (tree, level)'s ``BicriteriaLevel.step_update``, ``CenterSet.absorb``, ``Engine(bicriteria="external").step``
  + ``to_dict``, and the pickling of the batch-mode bag states — so that each Beam stage's time can be split
  into "our code" and "Beam's own work" (per-element, state, shuffles);
* **profile** — when the job misses a target (``--profile auto``), a cProfile of the job at
  ``--profile_n`` points, summed by package.

Every timed run is a fresh child process of this script (``--_stage``), so its peak RSS
(``ru_maxrss``) and CPU time (``getrusage(RUSAGE_SELF)``: the DirectRunner's batch mode runs the
pipeline in-process) are its own. BLAS/OpenMP pools are limited to 1 thread (as in
``run_benchmark.py``). The report goes to ``<out>/beam.md`` and stdout.
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import shlex  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

STD, BOX = 1.0, 10.0
TARGET_PTS_S = 30_000
TARGET_FLOOR_RATIO = 3.0
CHEAP_STAGES, CHEAP_REPEATS = ("empty", "floor_read", "floor_parse"), 3  # sub-second: at least 3 runs each
MB = 1024 * 1024


# --------------------------------------------------------------------------- helpers

class _Clock:
    """Wall and CPU (getrusage of this process, all threads) between start and stop."""

    def __enter__(self):
        self.w0 = time.perf_counter()
        r = resource.getrusage(resource.RUSAGE_SELF)
        self.c0 = r.ru_utime + r.ru_stime
        rc = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cc0 = rc.ru_utime + rc.ru_stime
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.w0
        r = resource.getrusage(resource.RUSAGE_SELF)
        self.cpu = r.ru_utime + r.ru_stime - self.c0
        rc = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu_children = rc.ru_utime + rc.ru_stime - self.cc0
        return False


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _quiet_beam():
    import logging
    for name in ("apache_beam", "absl", "dpstream"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _options():
    from apache_beam.options.pipeline_options import PipelineOptions
    return PipelineOptions(["--runner=DirectRunner"])


def _counter(result, name: str) -> int:
    from apache_beam.metrics.metric import MetricsFilter
    res = result.metrics().query(MetricsFilter().with_namespace("dpstream").with_name(name))["counters"]
    return int(sum(c.committed if c.committed is not None else c.attempted for c in res))


def _job_argv(ctx: dict, data_glob: str, out_dir: str, n: int, seed_file: str = None) -> list:
    return [f"--input={data_glob}", f"--output={out_dir}", f"--dim={ctx['d']}", f"--radius={ctx['radius']!r}",
            f"--k={ctx['k']}", f"--tick_size={ctx['tick_size']}",
            f"--horizon_ticks={math.ceil(n / ctx['tick_size'])}", f"--seed_file={seed_file or ctx['seed_file']}"]


# --------------------------------------------------------------------------- child stages

PREIMPORT = ("numpy", "scipy", "apache_beam", "apache_beam.runners.direct.direct_runner",
             "apache_beam.runners.portability.fn_api_runner.fn_runner", "apache_beam.io.textio",
             "apache_beam.transforms.userstate", "dpstream.engine", "dpstream.privacy", "dpstream.offline",
             "transforms.parse", "transforms.ticks", "transforms.bicriteria", "transforms.cluster",
             "pipelines.sources", "pipelines.sinks", "pipelines.dp_stream_cluster")


def _preimport() -> float:
    """Import every module any stage uses before its clock starts, in every child alike: module imports
    are a one-time cost of the interpreter, not throughput (this sandbox sets PYTHONDONTWRITEBYTECODE, so
    an import compiles from source; the children cache bytecode under the work directory instead)."""
    import importlib
    t0 = time.perf_counter()
    for m in PREIMPORT:
        importlib.import_module(m)
    return time.perf_counter() - t0


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
        _ = parsed.points | "BatchIntoTicks" >> jm._batch_into_ticks(job) | "Drop" >> beam.Map(lambda _: None)
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


def stage_engine(ctx):
    """The library engine alone on the same rows; checks the job's releases tick by tick."""
    import pickle

    import numpy as np

    from dpstream.engine import Engine
    from pipelines import dp_stream_cluster as jm
    from transforms.cluster import load_seed

    X = np.load(ctx["data_file"])
    n, ts = X.shape[0], ctx["tick_size"]
    job, _ = jm.parse_args(_job_argv(ctx, ctx["data_glob"], ctx["work"] + "/unused_out", n))
    cfg = jm.engine_config(job)
    T = job.horizon_ticks

    job_lines = {}
    rel_path = ctx.get("releases")
    if rel_path and os.path.exists(rel_path):
        with open(rel_path) as fh:
            for line in fh:
                if line.strip():
                    job_lines.setdefault(int(json.loads(line)["tick"]), []).append(line)

    seed = load_seed(ctx["seed_file"])
    step_wall = step_cpu = dict_cpu = dump_cpu = 0.0
    with _Clock() as c_init:
        eng = Engine(cfg, seed)
    mismatched, missing, compared = [], [], 0
    json_bytes = coreset_json_bytes = privacy_json_bytes = repeated = 0
    prev_coreset = None
    for t in range(1, T + 1):
        x = X[(t - 1) * ts: t * ts]
        w0, c0 = time.perf_counter(), time.process_time()
        rel = eng.step(x)
        step_wall += time.perf_counter() - w0
        step_cpu += time.process_time() - c0
        c0 = time.process_time()
        dct = rel.to_dict()
        c1 = time.process_time()
        s = json.dumps(dct)
        dump_cpu += time.process_time() - c1
        dict_cpu += c1 - c0
        json_bytes += len(s)
        coreset_json_bytes += len(json.dumps(dct["coreset_points"]))
        privacy_json_bytes += len(json.dumps(dct["privacy"]))
        if prev_coreset is not None and rel.coreset_points is prev_coreset:
            repeated += 1  # the engine's cached release: same coreset as the previous tick
        prev_coreset = rel.coreset_points
        got = job_lines.get(t)
        if not got:
            missing.append(t)
        else:
            compared += 1
            if len(got) != 1 or json.loads(got[0]) != json.loads(s):
                mismatched.append(t)
    extra = sorted(set(job_lines) - set(range(1, T + 1)))
    pickle_wall = unpickle_wall = math.inf
    for _ in range(5):  # best of 5: one state round trip of the engine
        w0 = time.perf_counter()
        blob = pickle.dumps(eng, pickle.HIGHEST_PROTOCOL)
        pickle_wall = min(pickle_wall, time.perf_counter() - w0)
        w0 = time.perf_counter()
        pickle.loads(blob)
        unpickle_wall = min(unpickle_wall, time.perf_counter() - w0)
    return {"wall": c_init.wall + step_wall, "cpu": c_init.cpu + step_cpu, "init_wall": c_init.wall,
            "step_wall": step_wall, "step_cpu": step_cpu, "to_dict_cpu": dict_cpu, "json_cpu": dump_cpu,
            "rss_mb": _peak_rss_mb(), "rows": int(eng.n_points), "ticks": T,
            "compared": compared, "mismatched": mismatched[:20], "n_mismatched": len(mismatched),
            "missing": missing[:20], "n_missing": len(missing), "extra": extra[:20],
            "job_releases_found": bool(job_lines),
            "state_size": eng.state_size(), "peak_state": int(eng.peak_state), "pickle_bytes": len(blob),
            "pickle_wall": pickle_wall, "unpickle_wall": unpickle_wall,
            "n_clipped": int(eng.n_clipped), "json_bytes": json_bytes, "coreset_json_bytes": coreset_json_bytes,
            "privacy_json_bytes": privacy_json_bytes, "repeated_coresets": repeated}


def stage_micro(ctx):
    """The job's own Python code, called directly (no Beam), on the elements each of its stages sees:
    one numpy record per 8192 rows, one ParsedBatch per record, one merged batch per tick."""
    import pickle
    from collections import defaultdict

    import numpy as np

    from dpstream.bicriteria import BicriteriaLevel, CenterSet
    from dpstream.engine import Engine
    from dpstream.grids import ShiftedGrids
    from dpstream.noise import NoiseSource
    from dpstream.privacy import PrivacyPlan
    from pipelines import dp_stream_cluster as jm
    from pipelines.sources import NPY_CHUNK_ROWS
    from transforms.bicriteria import _LevelUpdatesFn, level_keys
    from transforms.cluster import load_seed
    from transforms.parse import ParsedBatch, ParsePointsFn, Record
    from transforms.ticks import _AssignTicksFn, merge_partials

    HP = pickle.HIGHEST_PROTOCOL
    X = np.load(ctx["data_file"])
    n, d = X.shape
    job, _ = jm.parse_args(_job_argv(ctx, ctx["data_glob"], ctx["work"] + "/unused_out", n))
    cfg = jm.engine_config(job)
    seed = load_seed(ctx["seed_file"])
    out = {}

    # ParsePoints as the job applies it: one Record per 8192-row chunk (what ReadFileRecords emits)
    records = [Record(X[i:i + NPY_CHUNK_ROWS], i) for i in range(0, n, NPY_CHUNK_ROWS)]
    fn = ParsePointsFn(d, "auto", batch_arrays=True)
    batches = []
    with _Clock() as c:
        for rec in records:
            batches.extend(fn.process(rec))
    if not all(isinstance(b, ParsedBatch) for b in batches) or sum(len(b.points) for b in batches) != n:
        raise RuntimeError("ParsePointsFn(batch_arrays=True) did not emit one ParsedBatch per record")
    out["parse"] = {"wall": c.wall, "cpu": c.cpu, "records": len(records), "batches": len(batches)}

    # BatchIntoTicks' AssignTicks: the ParsedBatch elements in one bundle (a flush every max_buffer points)
    bit = jm._batch_into_ticks(job)
    afn = _AssignTicksFn(bit.clock, bit.dim, None, time.time, "")
    afn.setup()
    parts = []
    with _Clock() as c:
        afn.start_bundle()
        for b in batches:
            for tv in afn.process(b):
                parts.append(tv.value)
        for wv in afn.finish_bundle():
            parts.append(wv.value)
    out["assign_ticks"] = {"wall": c.wall, "cpu": c.cpu, "partials": len(parts), "max_buffer": afn.max_buffer}
    del batches

    # … and its MergeTick: one sorted _Partial per (shard, tick)
    by_tick = defaultdict(list)
    for (shard, tick), part in parts:
        by_tick[tick].append(part)
    with _Clock() as c:
        merged = {t: merge_partials(ps) for t, ps in sorted(by_tick.items())}
    out["merge"] = {"wall": c.wall, "cpu": c.cpu, "ticks": len(merged)}
    del parts, by_tick

    # BicriteriaCenters' stateless LevelUpdates: each (tree, level)'s counter update per tick batch
    lfn = _LevelUpdatesFn(cfg, ctx["seed_file"])
    lfn.setup()
    updates = defaultdict(dict)  # (q, lv) -> {tick: update}
    with _Clock() as c:
        for t, part in merged.items():
            for key, (_, tick, u) in lfn.process(((0, t), part)):
                updates[key][tick] = u
    out["level_updates"] = {"wall": c.wall, "cpu": c.cpu, "keys": len(lfn.keys),
                            "elements": sum(map(len, updates.values())),
                            "bytes": sum(len(pickle.dumps((key, ("tick", t, u)), HP))
                                         for key, us in updates.items() for t, u in us.items()),
                            "widths": sorted({int(u.size) for us in updates.values() for u in us.values()})}

    # … its Levels keys: one BicriteriaLevel each (built as _BicriteriaLevelFn builds it), stepped every tick
    T = cfg.horizon_ticks
    with _Clock() as c:
        levels = {}
        for key in level_keys(cfg):
            noise = NoiseSource(seed)
            levels[key] = BicriteriaLevel(cfg, PrivacyPlan.build(cfg, seed_hash=noise.seed_hash), noise, *key)
    out["level_init"] = {"wall": c.wall, "cpu": c.cpu}
    reports = defaultdict(list)
    with _Clock() as c:
        for key, level in levels.items():
            us = updates.get(key, {})
            for t in range(1, T + 1):
                u = us.get(t)
                reports[t].append(level.step_update(None if u is None else u.astype(np.int64)))
    out["level_steps"] = {"wall": c.wall, "cpu": c.cpu}

    # CenterRegistry: one CenterSet absorbing every tick's reports
    with _Clock() as c:
        cset = CenterSet(cfg, ShiftedGrids(cfg, NoiseSource(seed)))
        bic = {t: cset.absorb(reports[t]) for t in range(1, T + 1)}
    out["registry"] = {"wall": c.wall, "cpu": c.cpu}
    del reports

    # ClusterTicks: the engine without its bicriteria, stepped with the registry's updates; the releases' dicts
    step_cpu = dict_cpu = 0.0
    rels = []
    with _Clock() as c_init:
        eng = Engine(cfg, seed, bicriteria="external")
    for t in range(1, T + 1):
        part = merged.get(t)
        x = part.points if part is not None else np.zeros((0, d))
        c0 = time.process_time()
        rel = eng.step(x, bic[t])
        c1 = time.process_time()
        dct = rel.to_dict()
        dict_cpu += time.process_time() - c1
        step_cpu += c1 - c0
        rels.append((dct["tick"], dct["count_estimate"], dct["n_candidate_centers"], dct["centers"]))
    out["engine_external"] = {"cpu": c_init.cpu + step_cpu, "init_cpu": c_init.cpu, "step_cpu": step_cpu,
                              "to_dict_cpu": dict_cpu}
    with _Clock() as c:
        blob = pickle.dumps(eng, HP)
        pickle.loads(blob)
    out["engine_state"] = {"wall": c.wall, "cpu": c.cpu, "bytes": len(blob)}

    # the same releases as the job's (so these are the job's computations): centers and count estimates
    rel_path, same = ctx.get("releases"), None
    if rel_path and os.path.exists(rel_path):
        job_rels = {}
        with open(rel_path) as fh:
            for line in fh:
                if line.strip():
                    r = json.loads(line)
                    job_rels[int(r["tick"])] = [r["tick"], r["count_estimate"], r["n_candidate_centers"], r["centers"]]
        same = len(job_rels) == len(rels) and all(job_rels.get(r[0]) == json.loads(json.dumps(list(r))) for r in rels)
    out["same_as_job"] = same

    # batch mode: ClusterTicks adds every (tick, _Partial) to a BagState (PickleCoder) and reads them all back;
    # each level key does the same with its (tick, update) elements
    with _Clock() as c:
        blobs = [pickle.dumps((t, p), HP) for t, p in merged.items()]
        for b in blobs:
            pickle.loads(b)
    out["bag_pickle"] = {"wall": c.wall, "cpu": c.cpu, "bytes": sum(len(b) for b in blobs)}
    with _Clock() as c:
        blobs = [pickle.dumps((t, u), HP) for us in updates.values() for t, u in us.items()]
        for b in blobs:
            pickle.loads(b)
    out["level_bag_pickle"] = {"wall": c.wall, "cpu": c.cpu, "bytes": sum(len(b) for b in blobs)}
    return out


STAGES = {"empty": stage_empty, "floor_read": stage_floor_read, "floor_parse": stage_floor_parse,
          "floor_ticks": stage_floor_ticks, "floor_cluster": stage_floor_cluster, "job": stage_job,
          "job_profile": stage_job_profile,
          "engine": stage_engine, "micro": stage_micro}


# --------------------------------------------------------------------------- profile summary

_BUCKETS = (
    ("apache_beam/coders", "Beam coders"),
    ("apache_beam/runners/portability/fn_api_runner", "Beam FnApiRunner (driver)"),
    ("apache_beam/runners/worker", "Beam SDK worker (operations, bundle processing)"),
    ("apache_beam/runners", "Beam runners (other)"),
    ("apache_beam/transforms", "Beam transforms (DoFn invokers, userstate, …)"),
    ("apache_beam/metrics", "Beam metrics"),
    ("apache_beam/utils", "Beam utils (WindowedValue, Timestamp, …)"),
    ("apache_beam", "Beam (other)"),
    ("/dpstream/", "dpstream library (engine)"),
    ("/transforms/", "our transforms (parse, ticks, bicriteria, cluster)"),
    ("/pipelines/", "our pipeline (sources, sinks, job)"),
    ("numpy", "numpy (Python part)"),
    ("objsize", "objsize (Beam's state cache sizing)"),
    ("dp_accounting", "dp_accounting (privacy plan)"),
    ("site-packages", "other site-packages"),
    ("python3", "Python stdlib"),
)

_KEY_FUNCS = (  # (module, qualified name, label); resolved to (file, first line) so classes are told apart
    ("pipelines.sources", "_ReadFileFn.process", "_ReadFileFn.process (per file)"),
    ("transforms.parse", "ParsePointsFn.process", "ParsePointsFn.process (per record)"),
    ("transforms.parse", "_parse_array", "↳ _parse_array (one ParsedBatch per record)"),
    ("transforms.ticks", "_AssignTicksFn.process", "_AssignTicksFn.process (per ParsedBatch)"),
    ("transforms.ticks", "_AssignTicksFn._process_batch", "↳ _AssignTicksFn._process_batch"),
    ("transforms.ticks", "_AssignTicksFn._flush", "↳ _AssignTicksFn._flush (cut into (shard, tick) partials)"),
    ("transforms.ticks", "_MergeTickFn.process", "_MergeTickFn.process (per tick)"),
    ("transforms.ticks", "merge_partials", "merge_partials"),
    ("transforms.bicriteria", "_LevelUpdatesFn.process", "_LevelUpdatesFn.process (per tick batch)"),
    ("dpstream.bicriteria", "_level_update", "↳ _level_update (per (tree, level))"),
    ("transforms.bicriteria", "_BicriteriaLevelFn.process", "_BicriteriaLevelFn.process (per update)"),
    ("transforms.bicriteria", "_BicriteriaLevelFn.on_tick", "_BicriteriaLevelFn.on_tick (level steps)"),
    ("dpstream.bicriteria", "BicriteriaLevel.step_update", "↳ BicriteriaLevel.step_update"),
    ("transforms.bicriteria", "_CenterRegistryFn.process", "_CenterRegistryFn.process"),
    ("dpstream.bicriteria", "CenterSet.absorb", "↳ CenterSet.absorb"),
    ("transforms.cluster", "_ClusterTicksFn.process", "_ClusterTicksFn.process"),
    ("transforms.cluster", "_ClusterTicksFn.on_tick", "_ClusterTicksFn.on_tick"),
    ("transforms.cluster", "_ClusterTicksFn._advance", "_ClusterTicksFn._advance (engine + state)"),
    ("dpstream.engine", "Engine.__init__", "↳ Engine.__init__ (privacy plan)"),
    ("dpstream.engine", "Engine.step", "↳ Engine.step (without bicriteria)"),
    ("dpstream.merge_reduce", "EpochMergeReduce.step", "↳↳ EpochMergeReduce.step"),
    ("dpstream.engine", "Engine._release", "↳↳ Engine._release (coreset B + k-means)"),
    ("dpstream.release", "Release.to_dict", "↳ Release.to_dict"),
    ("json", "dumps", "json.dumps (WriteReleases' ToJson)"),
    ("apache_beam.runners.worker.statecache", "get_deep_size", "Beam state cache: get_deep_size (objsize)"),
    ("apache_beam.transforms.userstate", "get_dofn_specs", "Beam: get_dofn_specs (DoFn signature checks)"),
)


def _code_key(module: str, qualname: str):
    import importlib
    import inspect
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        code = inspect.unwrap(obj).__code__
    except Exception:  # the code moved: skip the row
        return None
    return os.path.realpath(code.co_filename), code.co_firstlineno, code.co_name


def summarise_profile(path: str, cpu: float) -> dict:
    import pstats
    st = pstats.Stats(path)
    total = sum(v[2] for v in st.stats.values())
    buckets = {}
    for (fname, _line, func), (_cc, _nc, tt, _ct, _callers) in st.stats.items():
        name = "C builtins (pickle, numpy ufuncs, list ops, …)" if fname == "~" else "other"
        if fname != "~":
            for pat, label in _BUCKETS:
                if pat in fname:
                    name = label
                    break
        buckets[name] = buckets.get(name, 0.0) + tt
    top = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:20]
    top_rows = []
    for (fname, line, func), (cc, nc, tt, ct, _c) in top:
        short = fname if fname == "~" else "/".join(Path(fname).parts[-2:])
        top_rows.append({"func": f"{short}:{line}({func})", "calls": nc, "tottime": tt, "cumtime": ct})
    by_key = {(os.path.realpath(f) if f != "~" else f, line, func): v for (f, line, func), v in st.stats.items()}
    keys = []
    for module, qualname, label in _KEY_FUNCS:
        key = _code_key(module, qualname)
        if key in by_key:
            _cc, nc, _tt, ct, _callers = by_key[key]
            keys.append({"label": label, "calls": nc, "cumtime": ct})
    known = {k for k in (_code_key(m, q) for m, q, _ in _KEY_FUNCS) if k}
    for key, (_cc, nc, _tt, ct, _callers) in sorted(by_key.items(), key=lambda kv: -kv[1][3]):
        if key in known or ct < 0.01 * total or not key[0].startswith(str(REPO / "transforms") + os.sep):
            continue  # other functions of our transforms (stages added since this list was written)
        keys.append({"label": f"{Path(key[0]).stem}.{key[2]} (line {key[1]})", "calls": nc, "cumtime": ct})
    return {"total_tottime": total, "cpu": cpu,
            "buckets": sorted(buckets.items(), key=lambda kv: -kv[1]), "top": top_rows, "key": keys}


# --------------------------------------------------------------------------- parent

def run_stage(name: str, ctx: dict, timeout: float = 3600) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, dir=ctx["work"]) as fh:
        json.dump(ctx, fh)
        ctx_path = fh.name
    res_path = ctx_path + ".result"
    t0 = time.perf_counter()
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(ctx["work"], "pycache")  # never inside the repo or the venv
    # the job records each --seed_file's fingerprint (pipelines.seed_registry, if present): the benchmark's
    # throw-away seeds go to a registry in the work directory, not to the user's ~/.dpstream
    env["DPSTREAM_SEED_REGISTRY"] = os.path.join(ctx["work"], "seed_registry.jsonl")
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--_stage", name, "--_ctx", ctx_path,
                           "--_result", res_path], cwd=str(REPO), capture_output=True, text=True, timeout=timeout,
                          env=env)
    if proc.returncode != 0 or not os.path.exists(res_path):
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
        raise RuntimeError(f"stage {name} failed (exit {proc.returncode})")
    with open(res_path) as fh:
        res = json.load(fh)
    res["process_wall"] = time.perf_counter() - t0
    timed = f"wall {res['wall']:.2f} s, cpu {res['cpu']:.2f} s, " if "wall" in res else ""
    rss = f"peak RSS {res['rss_mb']:.0f} MB " if "rss_mb" in res else ""
    print(f"  [{name}] {timed}{rss}(imports {res['import_wall']:.1f} s, process {res['process_wall']:.1f} s)",
          flush=True)
    return res


def code_fingerprint() -> dict:
    """A hash per file of the measured packages as they are on disk (so a commit of the same files during the
    run is told apart from an edit, and an edit names its files)."""
    import hashlib
    return {str(f.relative_to(REPO)): hashlib.sha256(f.read_bytes()).hexdigest()
            for pkg in ("dpstream", "transforms", "pipelines") for f in sorted((REPO / pkg).rglob("*.py"))}


def code_version() -> str:
    """The commit measured, and whether the measured packages had uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=str(REPO), capture_output=True,
                              text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "dpstream", "transforms", "pipelines"],
                               cwd=str(REPO), capture_output=True, text=True, timeout=30).stdout.split("\n")
        dirty = sorted(line[3:] for line in dirty if line.strip())
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    return f"commit {head}" + (f" + uncommitted changes in {', '.join(dirty)}" if dirty else " (clean)")


def best(runs):
    return min(runs, key=lambda r: r["wall"])


def fmt_rate(v):
    return f"{v / 1000:,.1f}k" if v < 1e6 else f"{v / 1e6:,.2f}M"


def build_report(args, ctx, res, command, gen_wall) -> str:
    import apache_beam
    import numpy as np

    n, d, k = ctx["n"], ctx["d"], ctx["k"]
    T = math.ceil(n / ctx["tick_size"])
    empty, fr, fp, ft, fc = (best(res[s]) for s in ("empty", "floor_read", "floor_parse", "floor_ticks",
                                                    "floor_cluster"))
    job, eng, micro = best(res["job"]), res["engine"], res["micro"]
    imports = [r["import_wall"] for runs in res.values() for r in (runs if isinstance(runs, list) else [runs])]
    L = []
    L.append("# Beam job benchmark: `pipelines.dp_stream_cluster` vs its floors and the engine\n")
    L.append(f"Command (from the repository root): `{command}`\n")
    L.append(f"Machine: 2 cores, shared with other work (timings indicative; CPU time is the steadier clock), "
             f"{platform.python_implementation()} {platform.python_version()}, Apache Beam {apache_beam.__version__} "
             f"(`DirectRunner`; a bounded pipeline runs on the FnApiRunner in-process, one bundle at a time), "
             f"numpy {np.__version__}, BLAS/OpenMP threads = {os.environ.get('OMP_NUM_THREADS')}. "
             f"Date: {time.strftime('%Y-%m-%d')}. Code measured: {ctx['code']} (the working tree).\n")
    L.append(f"Data: `gaussian_mixture(n={n:,}, d={d}, k={k}, std={STD}, box={BOX}, seed=0)` saved as one .npy file; "
             f"public radius Λ = (box + 5·std)·√d = {ctx['radius']:.4f}; `--tick_size {ctx['tick_size']}`, "
             f"`--horizon_ticks` = ⌈n / tick_size⌉ = {T}; ε = 1, δ = 1e-6 (the job's defaults); `--seed_file`: a "
             f"temporary file with the hex text of 32 random bytes. Each run is a fresh child process, timed from "
             f"pipeline construction to `wait_until_finish` (the job: the whole `run([...])` call); module imports "
             f"are done before the clock starts ({min(imports):.1f}–{max(imports):.1f} s per process, a one-time "
             f"cost, not included). Best wall time of {args.repeats} run(s) per pipeline (of "
             f"{max(args.repeats, CHEAP_REPEATS)} for the sub-second ones: the empty pipeline and the two floors).\n")

    L.append("## Throughput\n")
    L.append("| run | what it does | wall s | CPU s | points/s (wall) | points/s (CPU) | peak RSS MB | job / this (wall) |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|")

    def row(name, what, r):
        L.append(f"| {name} | {what} | {r['wall']:.2f} | {r['cpu']:.2f} | {fmt_rate(n / r['wall'])} | "
                 f"{fmt_rate(n / r['cpu'])} | {r['rss_mb']:.0f} | {job['wall'] / r['wall']:.2f}× |")

    L.append(f"| empty pipeline | `Create([0]) → Map(None)`: runner start-up | {empty['wall']:.2f} | "
             f"{empty['cpu']:.2f} | – | – | {empty['rss_mb']:.0f} | – |")
    row("floor: read", "`ReadFileRecords` → count rows", fr)
    row("**floor: read + parse**", "`ReadFileRecords → ParsePoints(batch_arrays=True) → Map(None)`: one "
        "`ParsedBatch` per record", fp)
    row("read + parse + ticks", "… `→ BatchIntoTicks → Map(None)`", ft)
    row("job without sinks", "`run([...])` with `WriteJsonLines` replaced by `Map(None)`", fc)
    row("**job**", "`dp_stream_cluster.run([...])`: … `→ WriteReleases` (`releases.jsonl`)", job)
    row("engine alone", "`Engine(cfg, seed)` + `.step(x)` per tick, no Beam", eng)
    L.append("")
    if fc.get("job_stages"):
        L.append(f"The job's top-level stages: {' → '.join(f'`{x}`' for x in fc['job_stages'])}.\n")
    L.append(f"Rows seen: read {fr['rows']:,}, parsed {fp['rows']:,}, ticked {ft['rows']:,}, clustered "
             f"{fc['rows']:,}; the job's `points_processed` {job['rows']:,} in {job['ticks_released']:,} releases; "
             f"engine {eng['rows']:,}. CPU in sub-processes during the job: {job['cpu_children']:.2f} s (everything "
             f"ran in-process). Engine: privacy plan + construction {eng['init_wall']:.2f} s, steps "
             f"{eng['step_wall']:.2f} s wall, {eng['step_cpu']:.2f} s CPU ({fmt_rate(n / eng['step_cpu'])} points "
             f"per CPU second); the releases' `to_dict` ({eng['to_dict_cpu']:.2f} s CPU) and `json.dumps` "
             f"({eng['json_cpu']:.2f} s CPU) are not in its row — the job pays them.\n")

    # targets
    rate, rate_cpu = n / job["wall"], n / job["cpu"]
    ratio, ratio_cpu = job["wall"] / fp["wall"], job["cpu"] / fp["cpu"]
    eq = eng["job_releases_found"] and eng["n_mismatched"] == 0 and eng["n_missing"] == 0 and not eng["extra"]
    nd = n * d
    mp, ma, mm = micro["parse"], micro["assign_ticks"], micro["merge"]
    mlu, mli, mls, mreg = micro["level_updates"], micro["level_init"], micro["level_steps"], micro["registry"]
    mee, mes, mb, mlb = micro["engine_external"], micro["engine_state"], micro["bag_pickle"], micro["level_bag_pickle"]
    n_keys = mlu["keys"]
    widths = mlu["widths"]
    wtxt = (f"{min(widths):,}–{max(widths):,}" if len(widths) > 1 else f"{widths[0]:,}") if widths else "–"
    verdict = lambda ok: "**PASS**" if ok else "**MISS**"  # noqa: E731
    L.append("## Targets and checks\n")
    L.append("| check | target | measured | verdict |")
    L.append("|---|---|---|---|")
    cpu_note = "" if (rate_cpu >= TARGET_PTS_S) == (rate >= TARGET_PTS_S) else \
        f" ({'PASS' if rate_cpu >= TARGET_PTS_S else 'MISS'} on CPU time)"
    L.append(f"| job throughput | ≥ {TARGET_PTS_S / 1000:.0f}k points/s | {fmt_rate(rate)} points/s wall, "
             f"{fmt_rate(rate_cpu)} per CPU second | {verdict(rate >= TARGET_PTS_S)} (wall){cpu_note} |")
    cpu_note = "" if (ratio_cpu <= TARGET_FLOOR_RATIO) == (ratio <= TARGET_FLOOR_RATIO) else \
        f" ({'PASS' if ratio_cpu <= TARGET_FLOOR_RATIO else 'MISS'} on CPU time)"
    L.append(f"| job / floor (read + parse) | ≤ {TARGET_FLOOR_RATIO:.0f}× | {ratio:.2f}× wall, "
             f"{ratio_cpu:.2f}× CPU (vs the read-only floor: {job['wall'] / fr['wall']:.1f}× wall) | "
             f"{verdict(ratio <= TARGET_FLOOR_RATIO)} (wall){cpu_note} |")
    L.append(f"| release quality equals the engine's | every tick's release identical after a JSON round trip | "
             f"{eng['compared']:,} of {eng['ticks']:,} ticks compared: {eng['n_mismatched']} differ, "
             f"{eng['n_missing']} missing, {len(eng['extra'])} extra | {'**identical**' if eq else '**DIFFERENT**'} |")
    L.append(f"| Beam state bounded as in the engine | the state `ClusterTicks` keeps between firings is the engine | "
             f"`state_size()` at the end {eng['state_size']:,} floats = {100 * eng['state_size'] / nd:.2f}% of "
             f"n·d ({nd:,}); peak {eng['peak_state']:,} ({100 * eng['peak_state'] / nd:.2f}%). "
             f"`pickle.dumps(engine)` = {eng['pickle_bytes']:,} bytes ({eng['pickle_bytes'] / MB:.2f} MB; pickle "
             f"{eng['pickle_wall'] * 1e3:.0f} ms, unpickle {eng['unpickle_wall'] * 1e3:.0f} ms); the job's "
             f"`ReadModifyWriteState` holds the engine without its bicriteria: {mes['bytes']:,} bytes | "
             f"bounded (as in the engine) |")
    L.append(f"| batch-mode input buffers | – | `ClusterTicks` adds every tick's `(tick, _Partial)` to a `BagState` and "
             f"reads them all in its one timer firing: {mb['bytes']:,} bytes pickled ({mb['bytes'] / MB:.0f} MB, "
             f"{mb['bytes'] / n:.0f} B per point) held at once; each of the {n_keys} (tree, level) keys of "
             f"`BicriteriaCenters` buffers its `(tick, update)` elements the same way — counter updates of "
             f"{wtxt} integers per tick, no points: {mlb['bytes']:,} bytes ({mlb['bytes'] / MB:.0f} MB) for all "
             f"keys. Peak RSS: job {job['rss_mb']:.0f} MB, job without sinks {fc['rss_mb']:.0f} MB, read + parse "
             f"+ ticks {ft['rss_mb']:.0f} MB, floor {fp['rss_mb']:.0f} MB | grow with n |")
    L.append("")

    # breakdown
    job_stages = fc.get("job_stages") or []
    mid = [x for x in job_stages if x not in ("ReadFiles", "ParsePoints", "BatchIntoTicks")
           and not x.startswith("Write")]
    mid_stages = ", ".join(f"`{x}`" for x in mid) or "`ClusterTicks`"
    bic_ours = mlu["cpu"] + mli["cpu"] + mls["cpu"] + mreg["cpu"]
    cluster_ours = bic_ours + mee["cpu"] + mee["to_dict_cpu"] + mb["cpu"] + mlb["cpu"] + mes["cpu"]
    n_rec = mp["records"]
    stages = [
        ("runner start-up (the empty pipeline)", empty, None, None),
        (f"read: `ReadFileRecords` ({n_rec} records of ≤ 8192 rows)", fr, empty, None),
        ("parse: `ParsePoints(batch_arrays=True)`, one `ParsedBatch` per record", fp, fr,
         (mp["cpu"], f"`ParsePointsFn.process` {mp['cpu']:.2f} s ({mp['cpu'] / n_rec * 1e3:.1f} ms per record)")),
        (f"ticks: `BatchIntoTicks` (`_AssignTicksFn` on the batches, GroupByKey of {ma['partials']:,} partial "
         f"batches, `MergeTick`)", ft, fp,
         (ma["cpu"] + mm["cpu"], f"`_AssignTicksFn` {ma['cpu']:.2f} s, `merge_partials` {mm['cpu']:.2f} s")),
        (f"cluster: the job's stages between `BatchIntoTicks` and the sinks ({mid_stages})", fc, ft,
         (cluster_ours, f"`_LevelUpdatesFn` {mlu['cpu']:.1f} s + level keys' construction {mli['cpu']:.1f} s and "
                        f"steps {mls['cpu']:.1f} s + `CenterSet.absorb` "
                        f"{mreg['cpu']:.2f} s + engine without bicriteria {mee['cpu']:.1f} s + `to_dict` "
                        f"{mee['to_dict_cpu']:.1f} s + bag pickle in/out {mb['cpu'] + mlb['cpu']:.1f} s + engine "
                        f"state {mes['cpu']:.2f} s")),
        (f"write: the sinks (`WriteReleases`: `json.dumps`, `WriteToText` of {eng['json_bytes'] / MB:.0f} MB; "
         f"`WriteDeadLetters`: an empty `WriteToText`)", job, fc,
         (eng["json_cpu"], f"`json.dumps` {eng['json_cpu']:.1f} s")),
    ]
    L.append("## Where the job's time goes\n")
    L.append("Each stage's cost is the difference between two nested pipelines of the table above (so it includes "
             "Beam's per-element, per-bundle, state and shuffle work for that stage); \"our code\" is the job's "
             "own Python code for that stage called directly, without Beam, on the elements the stage sees (one "
             "record or `ParsedBatch` per 8192 rows, one merged batch per tick; CPU s); \"rest\" is the stage's "
             "CPU minus that: Beam's own work.\n")
    L.append("| stage | wall s | CPU s | share of job CPU | our code alone (CPU s) | rest (CPU s) |")
    L.append("|---|---:|---:|---:|---|---:|")
    jc = job["cpu"]
    for label, hi, lo, ours in stages:
        w = hi["wall"] - (lo["wall"] if lo else 0.0)
        c = hi["cpu"] - (lo["cpu"] if lo else 0.0)
        o = ours[1] if ours else "–"
        b = ("≈ 0" if c - ours[0] < 0.05 else f"{c - ours[0]:.1f}") if ours else "–"
        L.append(f"| {label} | {w:.1f} | {c:.1f} | {100 * c / jc:.0f}% | {o} | {b} |")
    ours_total = sum(ours[0] for *_, ours in stages if ours)
    L.append(f"| **job** | {job['wall']:.1f} | {jc:.1f} | 100% | {ours_total:.1f} | |")
    L.append("")
    neg = [label.split(":")[0] for label, hi, lo, _ in stages if lo and hi["cpu"] < lo["cpu"]]
    if neg:
        spread = max(max(r["cpu"] for r in res[k]) - min(r["cpu"] for r in res[k]) for k in CHEAP_STAGES)
        L.append(f"A negative difference ({', '.join(neg)}) means that stage costs less than the run-to-run noise "
                 f"of the sub-second pipelines (their CPU time varied by up to {spread:.2f} s between runs).\n")
    same = micro.get("same_as_job")
    same_txt = {True: "gives the job's releases (centers, count estimates, candidate counts: identical for all "
                      f"{T:,} ticks)",
                False: "does **not** give the job's releases (centers or count estimates differ) — the split "
                       "above is then only indicative",
                None: "was not compared with the job's releases"}[same]
    eng_bic = eng["step_cpu"] - mee["step_cpu"]
    bic_steps = mlu["cpu"] + mls["cpu"] + mreg["cpu"]
    L.append(f"Per element, in our code: `ParsePointsFn.process` {mp['cpu'] / n_rec * 1e3:.1f} ms per 8192-row "
             f"record ({mp['cpu'] / n * 1e9:.0f} ns per point: one float64 copy, a row-wise `isfinite`, one "
             f"`ParsedBatch`); `_AssignTicksFn` {ma['cpu'] / n_rec * 1e3:.1f} ms per batch including its flushes "
             f"(array operations: ticks from slots, one stable sort per flush of ≤ {ma['max_buffer']:,} points, "
             f"{ma['partials']:,} partial batches for {T:,} ticks); `merge_partials` {mm['cpu'] / T * 1e3:.2f} ms per "
             f"tick; `_LevelUpdatesFn` {mlu['cpu'] / T * 1e3:.2f} ms per tick batch for its {n_keys} (tree, level) "
             f"keys (clip, cell ids, bucket histograms), which then shuffle {mlu['elements']:,} updates of "
             f"{wtxt} integers ({mlu['bytes'] / MB:.0f} MB pickled) instead of points; each level key's "
             f"`step_update` (binary-mechanism noise and heavy-hitter decoding) "
             f"{mls['cpu'] / (n_keys * T) * 1e3:.2f} ms per tick; the engine without its bicriteria "
             f"{mee['step_cpu'] / T * 1e3:.1f} ms per tick. Called in this order, the split path {same_txt}. Its "
             f"bicriteria per tick (updates + level steps + registry: {bic_steps:.1f} s, plus {mli['cpu']:.1f} s "
             f"to build the {n_keys} level keys' privacy plans and counters) compares with {eng_bic:.1f} s inside "
             f"the engine alone (`step` {eng['step_cpu']:.1f} s − `step` without bicriteria "
             f"{mee['step_cpu']:.1f} s). The release JSON is {eng['json_bytes'] / MB:.0f} MB: the coreset points are "
             f"{100 * eng['coreset_json_bytes'] / max(1, eng['json_bytes']):.0f}% of it, the privacy plan "
             f"{100 * eng['privacy_json_bytes'] / max(1, eng['json_bytes']):.0f}%, and {eng['repeated_coresets']:,} "
             f"of {T:,} releases repeat the previous tick's coreset (the engine re-releases its cached coreset when "
             f"no DP output changed).\n")

    prof = res.get("job_profile")
    if prof:
        s = prof["summary"]
        tot = s["total_tottime"]
        L.append(f"### cProfile of the job (n = {prof['n']:,}, same d, k, tick_size: {prof['wall']:.1f} s wall under "
                 f"the profiler)\n")
        L.append("Beam's per-element machinery is compiled (Cython), so its time shows up inside its callers "
                 "(`bundle_processor.process_encoded`, the DoFns). Own time summed by package:\n")
        L.append("| package | own time s | share |")
        L.append("|---|---:|---:|")
        for name, tt in s["buckets"]:
            if tt / tot >= 0.01:
                L.append(f"| {name} | {tt:.2f} | {100 * tt / tot:.0f}% |")
        L.append("")
        L.append("Cumulative time of the job's functions (a generator's \"calls\" count its resumptions):\n")
        L.append("| function | calls | cumtime s | share |")
        L.append("|---|---:|---:|---:|")
        for kf in s["key"]:
            L.append(f"| {kf['label']} | {kf['calls']:,} | {kf['cumtime']:.2f} | {100 * kf['cumtime'] / tot:.0f}% |")
        L.append("")
        L.append("Top 15 functions by own time:\n")
        L.append("| function | calls | tottime s | cumtime s |")
        L.append("|---|---:|---:|---:|")
        for t in s["top"][:15]:
            L.append(f"| `{t['func']}` | {t['calls']:,} | {t['tottime']:.2f} | {t['cumtime']:.2f} |")
        L.append("")
    elif args.profile != "never":
        L.append("(The job met both targets: no profile was taken; `--profile always` forces one.)\n")

    # what bounds the ratio, and what is left
    serial = eng["cpu"] + eng["to_dict_cpu"] + eng["json_cpu"]
    floor_c = fp["cpu"]
    bound = (floor_c + serial) / floor_c
    need = TARGET_FLOOR_RATIO - 1
    L.append("## Reading the numbers\n")
    head = (f"* **What bounds job / floor.** The floor — read + the vectorised parse — costs {floor_c:.2f} s CPU "
            f"({floor_c / n * 1e6:.2f} µs per point, {empty['cpu']:.2f} s of it the runner's start-up), while the "
            f"engine's own computation alone ({eng['cpu']:.1f} s CPU, no Beam) and the releases' `to_dict` + "
            f"`json.dumps` ({eng['to_dict_cpu'] + eng['json_cpu']:.1f} s CPU) already take {serial:.1f} s on the "
            f"same single core, so job / floor ≥ (floor + {serial:.1f}) / floor = {bound:.1f}× on CPU before Beam "
            f"does any work.")
    if bound > TARGET_FLOOR_RATIO:
        L.append(f"{head} The ≤ {TARGET_FLOOR_RATIO:.0f}× target would need engine + serialisation ≤ {need:.0f} × "
                 f"floor = {need * floor_c:.1f} s, about {serial / (need * floor_c):.0f}× less than measured: the "
                 f"ratio is bounded by the DP engine's own time against a floor that is almost free, not by Beam.")
    else:
        L.append(f"{head} Within the ≤ {TARGET_FLOOR_RATIO:.0f}× target this leaves "
                 f"{(TARGET_FLOOR_RATIO - bound) * floor_c:.1f} s of CPU for tick assignment, Beam's own work and "
                 f"the sinks (measured: {jc - floor_c - serial:.1f} s).")
    others = jc - ours_total
    prof_txt = ""
    if prof:
        kf = {x["label"]: x["cumtime"] for x in prof["summary"]["key"]}
        ptot = prof["summary"]["total_tottime"]
        items = [f"{what} {100 * kf[label] / ptot:.0f}%" for label, what in (
            ("Beam state cache: get_deep_size (objsize)",
             "Beam's state cache measuring each state value it caches (`get_deep_size`, objsize)"),
            ("Beam: get_dofn_specs (DoFn signature checks)",
             "Beam's DoFn signature checks (`get_dofn_specs`, `inspect.signature`)")) if label in kf]
        if items:
            prof_txt = (f" In the profile above (n = {prof['n']:,}), cumulative shares of the profiled time: "
                        f"{'; '.join(items)}.")
    L.append(f"* **Beam's own work.** Everything but our code — the runner's start-up, reading the file "
             f"(`ReadFileRecords`, not split further) and the \"rest\" column — is {others:.1f} s CPU, "
             f"{100 * others / jc:.0f}% of the job; our code is {ours_total:.1f} s ({100 * ours_total / jc:.0f}%). "
             f"Reading, parsing and tick assignment together cost {ft['cpu'] - empty['cpu']:.1f} s CPU "
             f"({100 * (ft['cpu'] - empty['cpu']) / jc:.0f}% of the job); the cluster stage costs "
             f"{fc['cpu'] - ft['cpu']:.1f} s and the sinks {job['cpu'] - fc['cpu']:.1f} s.{prof_txt}")
    L.append(f"* **Release serialisation** ({eng['to_dict_cpu'] + eng['json_cpu']:.1f} s CPU, "
             f"{eng['json_bytes'] / MB:.0f} MB of JSON for {T:,} ticks): "
             f"{100 * eng['coreset_json_bytes'] / max(1, eng['json_bytes']):.0f}% of the bytes are coreset points and "
             f"{eng['repeated_coresets']:,} releases repeat the previous coreset verbatim. Writing the coreset only "
             f"when it changes (a field such as `coreset_of_tick`, pure post-processing of DP outputs) or encoding "
             f"the arrays with a faster encoder (e.g. `orjson` with numpy support instead of `tolist` + `json.dumps`) "
             f"would remove most of it; the engine-equality check would then compare the expanded form.")
    L.append(f"* **One key for the rest of Alg. 1.** The bicriteria already runs as {n_keys} (tree, level) keys fed "
             f"by a stateless per-batch step, but rings, DP-Merge-Reduce and the release (sensitivity sample and "
             f"k-means of the coreset) stay under `ClusterTicks`' single key ({mee['cpu']:.1f} s CPU here, "
             f"{fmt_rate(n / max(mee['step_cpu'], 1e-9))} points per CPU second in `step`): ring centers come from "
             f"the previous release, a loop (docs/beam-job-plan.md). On the DirectRunner, which must keep "
             f"`--direct_num_workers=1`, nothing runs in parallel anyway.")
    L.append(f"* **Batch-mode buffers.** Holding every tick until the single firing costs "
             f"{mb['bytes'] / MB:.0f} MB of bag state in `ClusterTicks` and {mlb['bytes'] / MB:.0f} MB in the level "
             f"keys (peak RSS {job['rss_mb']:.0f} MB vs {fc['rss_mb']:.0f} MB without the sinks and "
             f"{fp['rss_mb']:.0f} MB for the floor). On the FnApiRunner the GroupByKey's output is materialised before "
             f"the stateful stage runs anyway, so this is inherent to the runner; on a streaming runner the "
             f"looping-timer mode keeps only the ticks awaiting their timer (each firing then pays a state round "
             f"trip of the engine: ≈ {(eng['pickle_wall'] + eng['unpickle_wall']) * 1e3:.0f} ms here for the whole "
             f"engine, {T:,} × that = {T * (eng['pickle_wall'] + eng['unpickle_wall']):.1f} s per run).")
    L.append("")
    return "\n".join(L)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--tick_size", type=int, default=1000)
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each Beam pipeline (best wall time is reported)")
    ap.add_argument("--profile", choices=("auto", "always", "never"), default="auto",
                    help="cProfile the job when it misses a target (auto), always, or never")
    ap.add_argument("--profile_n", type=int, default=200_000, help="points of the profiled run (default 2e5)")
    ap.add_argument("--notes", default="", help="a paragraph appended to the report")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--_stage", help=argparse.SUPPRESS)
    ap.add_argument("--_ctx", help=argparse.SUPPRESS)
    ap.add_argument("--_result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args._stage:  # child process
        with open(args._ctx) as fh:
            ctx = json.load(fh)
        import_wall = _preimport()
        res = STAGES[args._stage](ctx)
        res["import_wall"] = import_wall
        with open(args._result, "w") as fh:
            json.dump(res, fh)
        return 0

    import numpy as np

    from dpstream.datasets import gaussian_mixture

    n, d, k = args.n, args.d, args.k
    if min(n, d, k, args.tick_size, args.repeats) < 1:
        ap.error("--n, --d, --k, --tick_size and --repeats must be >= 1")
    command = " ".join([".venv/bin/python", "benchmarks/beam_benchmark.py"] +
                       [shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)])
    work = tempfile.mkdtemp(prefix="dpstream-beam-bench-")
    try:
        t0 = time.perf_counter()
        X, _, _ = gaussian_mixture(n, d, k, std=STD, box=BOX, seed=0)
        os.makedirs(f"{work}/data")
        np.save(f"{work}/data/points.npy", X)
        profile_n = min(args.profile_n, n)
        if args.profile != "never":
            os.makedirs(f"{work}/prof")
            np.save(f"{work}/prof/points.npy", X[:profile_n])
        del X
        gen_wall = time.perf_counter() - t0
        seed_file, profile_seed_file = f"{work}/seed", f"{work}/seed_profile"
        for path in (seed_file, profile_seed_file):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(os.urandom(32).hex())
        ctx = {"n": n, "d": d, "k": k, "tick_size": args.tick_size, "radius": (BOX + 5 * STD) * math.sqrt(d),
               "work": work, "data_file": f"{work}/data/points.npy", "data_glob": f"{work}/data/*.npy",
               "profile_glob": f"{work}/prof/*.npy", "profile_n": profile_n, "seed_file": seed_file,
               "profile_seed_file": profile_seed_file, "code": code_version(), "code_fingerprint": code_fingerprint()}
        print(f"data: n={n:,} d={d} k={k} in {gen_wall:.1f} s; work dir {work}", flush=True)

        res = {}
        for name in ("empty", "floor_read", "floor_parse", "floor_ticks", "floor_cluster", "job"):
            runs = max(args.repeats, CHEAP_REPEATS) if name in CHEAP_STAGES else args.repeats
            res[name] = [run_stage(name, ctx) for _ in range(runs)]
        job = best(res["job"])
        if "DONE" not in job["state"]:
            raise RuntimeError(f"the job ended in state {job['state']}")
        res["engine"] = run_stage("engine", dict(ctx, releases=res["job"][-1]["releases"]))
        res["micro"] = run_stage("micro", dict(ctx, releases=res["job"][-1]["releases"]))
        missed = (n / job["wall"] < TARGET_PTS_S
                  or job["wall"] / best(res["floor_parse"])["wall"] > TARGET_FLOOR_RATIO)
        if args.profile == "always" or (args.profile == "auto" and missed):
            res["job_profile"] = run_stage("job_profile", ctx)

        code_end, fp_end = code_version(), code_fingerprint()
        if fp_end != ctx["code_fingerprint"]:
            fp0 = ctx["code_fingerprint"]
            changed = sorted(f for f in set(fp0) | set(fp_end) if fp0.get(f) != fp_end.get(f))
            print(f"warning: the code changed during the run: {ctx['code']} -> {code_end}: {', '.join(changed)}",
                  flush=True)
            ctx["code"] += (f" at the start; {code_end} at the end ({', '.join(changed)} edited during the run, "
                            f"so later stages may have run the edited version)")
        elif code_end != ctx["code"]:  # the same files, committed during the run
            ctx["code"] = f"{code_end} (the files measured, committed during the run; at the start: {ctx['code']})"
        report = build_report(args, ctx, res, command, gen_wall)
        if args.notes:
            report += "\n" + args.notes.strip() + "\n"
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "beam.md")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(report.rstrip() + "\n")
        print()
        print(report)
        print(f"\nwrote {path}")
        eng = res["engine"]
        return 0 if eng["n_mismatched"] == 0 and eng["n_missing"] == 0 and not eng["extra"] else 1
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
