"""A cProfile of the job summed by package, with the cumulative time of the job's key functions."""
from __future__ import annotations

import os
from pathlib import Path

from .common import REPO


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
    ("transforms.parser", "_parse_array", "↳ _parse_array (one ParsedBatch per record)"),
    ("transforms.ticks", "_AssignTicksFn.process", "_AssignTicksFn.process (per ParsedBatch)"),
    ("transforms.ticks", "_AssignTicksFn._process_batch", "↳ _AssignTicksFn._process_batch"),
    ("transforms.ticks", "_AssignTicksFn._flush", "↳ _AssignTicksFn._flush (cut into (shard, tick) partials)"),
    ("transforms.ticks", "_MergeTickFn.process", "_MergeTickFn.process (per tick)"),
    ("dpstream.clock", "merge_partials", "merge_partials"),
    ("transforms.bicriteria", "_LevelUpdatesFn.process", "_LevelUpdatesFn.process (per tick batch)"),
    ("dpstream.bicriteria", "level_update", "↳ level_update (per (tree, level))"),
    ("transforms.bicriteria", "_BicriteriaLevelFn.process", "_BicriteriaLevelFn.process (per update)"),
    ("transforms.bicriteria", "_BicriteriaLevelFn.on_tick", "_BicriteriaLevelFn.on_tick (level steps)"),
    ("dpstream.bicriteria", "BicriteriaLevel.step_update", "↳ BicriteriaLevel.step_update"),
    ("transforms.bicriteria", "_CenterRegistryFn.process", "_CenterRegistryFn.process"),
    ("dpstream.bicriteria", "CenterSet.absorb", "↳ CenterSet.absorb"),
    ("transforms.shard_ticks", "_ShardTicksFn.process", "ShardTicks (per point shard)"),
    ("transforms.shard_ticks", "_ShardTicksFn.on_tick", "ShardTicks' tick timer"),
    ("transforms.cluster", "_EpochPlanFn.process", "EpochPlan (per run)"),
    ("transforms.cluster", "_RouteFn.process", "RouteByEpoch"),
    ("transforms.epoch_stages", "_AssignRingsFn.process", "AssignRings (per epoch copy)"),
    ("transforms.epoch_stages", "_RingFn.process", "RingMergeReduce (per (run, epoch, ring))"),
    ("dpstream.merge_reduce", "RingMergeReduce.release_block", "↳ RingMergeReduce.release_block"),
    ("transforms.epoch_stages", "_EpochCloseFn.process", "EpochClose"),
    ("transforms.release_stages", "_ReleaseFn.process", "ReleaseCoreset (the global combine)"),
    ("transforms.release_stages", "_ClusterFn.process", "ClusterCoreset (per tick)"),
    ("dpstream.epochs", "release_centers", "↳ release_centers (k-means of the coreset)"),
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

