"""The library engine alone on the job's rows, tick by tick; every release compared (JSON round trip)
with the job's ``releases.jsonl``; the engine's state, pickled size and release sizes."""
from __future__ import annotations

import json
import math
import os
import time

from .common import _Clock, _job_argv, _peak_rss_mb


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
    from dpstream.release_log import ReleaseLog
    log = ReleaseLog()  # the job writes a release log: compare with the library's line of each release
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
            if len(got) != 1 or got[0].rstrip("\n") != log.line(rel):
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

