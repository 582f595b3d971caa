"""The job's own Python code, called directly (no Beam), on the elements each stage sees; with the
bicriteria on (``cfg.bicriteria``), also its keyed (tree, level) stages and the center registry."""
from __future__ import annotations

import json
import pickle
import os
import time

from .common import _Clock, _job_argv


HP = pickle.HIGHEST_PROTOCOL
NO_BICRITERIA = {"level_updates": {"wall": 0.0, "cpu": 0.0, "keys": 0, "elements": 0, "bytes": 0, "widths": []},
                 "level_init": {"wall": 0.0, "cpu": 0.0}, "level_steps": {"wall": 0.0, "cpu": 0.0},
                 "registry": {"wall": 0.0, "cpu": 0.0}, "level_bag_pickle": {"wall": 0.0, "cpu": 0.0, "bytes": 0}}


def _parse_and_ticks(X, job, out):
    """ParsePoints as the job applies it (one Record per 8192-row chunk, what ReadFileRecords emits), then
    BatchIntoTicks' AssignTicks (the ParsedBatch elements in one bundle) and its MergeTick per tick."""
    from collections import defaultdict

    from pipelines import dp_stream_cluster as jm
    from pipelines.sources import NPY_CHUNK_ROWS
    from transforms.parse import ParsedBatch, ParsePointsFn, Record
    from transforms.ticks import _AssignTicksFn, merge_partials

    n, d = X.shape
    records = [Record(X[i:i + NPY_CHUNK_ROWS], i) for i in range(0, n, NPY_CHUNK_ROWS)]
    fn = ParsePointsFn(d, "auto", batch_arrays=True)
    batches = []
    with _Clock() as c:
        for rec in records:
            batches.extend(fn.process(rec))
    if not all(isinstance(b, ParsedBatch) for b in batches) or sum(len(b.points) for b in batches) != n:
        raise RuntimeError("ParsePointsFn(batch_arrays=True) did not emit one ParsedBatch per record")
    out["parse"] = {"wall": c.wall, "cpu": c.cpu, "records": len(records), "batches": len(batches)}
    bit = jm.batch_into_ticks(job)
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
    by_tick = defaultdict(list)
    for (shard, tick), part in parts:
        by_tick[tick].append(part)
    with _Clock() as c:
        merged = {t: merge_partials(ps) for t, ps in sorted(by_tick.items())}
    out["merge"] = {"wall": c.wall, "cpu": c.cpu, "ticks": len(merged)}
    return merged


def _bicriteria(cfg, seed, seed_file, merged, out):
    """BicriteriaCenters (its stateless LevelUpdates, then one BicriteriaLevel per (tree, level) key stepped
    every tick) and CenterRegistry, as the job runs them when ``cfg.bicriteria``; returns the registry's
    update per tick and the level keys' buffered updates."""
    from collections import defaultdict

    import numpy as np

    from dpstream.bicriteria import BicriteriaLevel, CenterSet
    from dpstream.grids import ShiftedGrids
    from dpstream.noise import NoiseSource
    from dpstream.privacy import PrivacyPlan
    from transforms.bicriteria import _LevelUpdatesFn, level_keys
    from transforms.messages import LevelUpdate

    lfn = _LevelUpdatesFn(cfg, seed_file)
    lfn.setup()
    updates = defaultdict(dict)  # (q, lv, bucket shard) -> {tick: update}
    with _Clock() as c:
        for t, part in merged.items():
            for key, lu in lfn.process(((0, t), part)):
                updates[key][lu.tick] = lu.update
    out["level_updates"] = {"wall": c.wall, "cpu": c.cpu, "keys": len(level_keys(cfg)),
                            "elements": sum(map(len, updates.values())),
                            "bytes": sum(len(pickle.dumps((key, LevelUpdate(t, u)), HP))
                                         for key, us in updates.items() for t, u in us.items()),
                            "widths": sorted({int(u.size) for us in updates.values() for u in us.values()})}
    T = cfg.horizon_ticks
    with _Clock() as c:  # one BicriteriaLevel per key, built as _BicriteriaLevelFn builds it
        levels = {}
        for key in level_keys(cfg):
            noise = NoiseSource(seed)
            levels[key] = BicriteriaLevel(cfg, PrivacyPlan.build(cfg, test_seed=noise.test_seed), noise, *key)
    out["level_init"] = {"wall": c.wall, "cpu": c.cpu}
    reports = defaultdict(list)
    with _Clock() as c:
        for key, level in levels.items():
            us = updates.get(key, {})
            for t in range(1, T + 1):
                u = us.get(t)
                reports[t].append(level.step_update(None if u is None else u.astype(np.int64)))
    out["level_steps"] = {"wall": c.wall, "cpu": c.cpu}
    with _Clock() as c:  # CenterRegistry: one CenterSet absorbing every tick's reports
        cset = CenterSet(cfg, ShiftedGrids(cfg, NoiseSource(seed)))
        bic = {t: cset.absorb_shards(reports[t]) for t in range(1, T + 1)}
    out["registry"] = {"wall": c.wall, "cpu": c.cpu}
    with _Clock() as c:  # batch mode: each level key buffers its (tick, update) elements in a BagState
        blobs = [pickle.dumps((t, u), HP) for us in updates.values() for t, u in us.items()]
        for b in blobs:
            pickle.loads(b)
    out["level_bag_pickle"] = {"wall": c.wall, "cpu": c.cpu, "bytes": sum(len(b) for b in blobs)}
    return bic


def _same_as_job(rel_path, rels):
    """The split path's releases equal the job's (centers, count estimates, candidate counts)?"""
    if not (rel_path and os.path.exists(rel_path)):
        return None
    job_rels = {}
    with open(rel_path) as fh:
        for line in fh:
            if line.strip():
                r = json.loads(line)
                job_rels[int(r["tick"])] = [r["tick"], r["count_estimate"], r["n_candidate_centers"], r["centers"]]
    return len(job_rels) == len(rels) and all(job_rels.get(r[0]) == json.loads(json.dumps(list(r))) for r in rels)


def stage_micro(ctx):
    """The job's own Python code, called directly (no Beam), on the elements each of its stages sees:
    one numpy record per 8192 rows, one ParsedBatch per record, one merged batch per tick."""
    import numpy as np

    from dpstream.engine import Engine
    from pipelines import dp_stream_cluster as jm
    from transforms.cluster import load_seed

    X = np.load(ctx["data_file"])
    n, d = X.shape
    job, _ = jm.parse_args(_job_argv(ctx, ctx["data_glob"], ctx["work"] + "/unused_out", n))
    cfg = jm.engine_config(job)
    seed = load_seed(ctx["seed_file"])
    out = {"bicriteria": bool(cfg.bicriteria)}
    merged = _parse_and_ticks(X, job, out)
    if cfg.bicriteria:
        bic = _bicriteria(cfg, seed, ctx["seed_file"], merged, out)
    else:  # the job has no BicriteriaCenters / CenterRegistry stages
        bic = None
        out.update({k: dict(v) for k, v in NO_BICRITERIA.items()})
    # ClusterTicks: the engine (without its bicriteria when the job runs it in its own stages); the releases' dicts
    T = cfg.horizon_ticks
    step_cpu = dict_cpu = 0.0
    rels = []
    with _Clock() as c_init:
        eng = Engine(cfg, seed, bicriteria="external")
    for t in range(1, T + 1):
        part = merged.get(t)
        x = part.points if part is not None else np.zeros((0, d))
        c0 = time.process_time()
        rel = eng.step(x, bic[t]) if bic is not None else eng.step(x)
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
    out["same_as_job"] = _same_as_job(ctx.get("releases"), rels)
    with _Clock() as c:  # batch mode: ClusterTicks adds every (tick, Partial) to a BagState and reads them back
        blobs = [pickle.dumps((t, p), HP) for t, p in merged.items()]
        for b in blobs:
            pickle.loads(b)
    out["bag_pickle"] = {"wall": c.wall, "cpu": c.cpu, "bytes": sum(len(b) for b in blobs)}
    return out
