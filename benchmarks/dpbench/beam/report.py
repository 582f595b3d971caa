"""beam.md: the run, the throughput table, the targets and checks (then :mod:`.report_split`)."""
from __future__ import annotations

import math
import os
import platform
import time
from types import SimpleNamespace

from .common import BOX, CHEAP_REPEATS, MB, STD, TARGET_FLOOR_RATIO, TARGET_PTS_S
from .report_split import profile_section, reading, time_split
from .runner import best, fmt_rate


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
    bic = micro.get("bicriteria", True)
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
    L.append(f"| state bounded as in the engine | the library engine's state between ticks (the job's keyed stages hold the same components, split by key: `beam_keys.md`) | "
             f"`state_size()` at the end {eng['state_size']:,} floats = {100 * eng['state_size'] / nd:.2f}% of "
             f"n·d ({nd:,}); peak {eng['peak_state']:,} ({100 * eng['peak_state'] / nd:.2f}%). "
             f"`pickle.dumps(engine)` = {eng['pickle_bytes']:,} bytes ({eng['pickle_bytes'] / MB:.2f} MB; pickle "
             f"{eng['pickle_wall'] * 1e3:.0f} ms, unpickle {eng['unpickle_wall'] * 1e3:.0f} ms); a one-key "
             f"`ReadModifyWriteState` holding the engine{' without its bicriteria' if bic else ''} would be "
             f"{mes['bytes']:,} bytes | "
             f"bounded (as in the engine) |")
    L.append(f"| batch-mode input buffers | – | `ShardTicks` adds every tick's `(tick, Partial)` to a `BagState` and "
             f"reads them all in its one timer firing (over all its point shards together): {mb['bytes']:,} bytes pickled ({mb['bytes'] / MB:.0f} MB, "
             f"{mb['bytes'] / n:.0f} B per point) held at once; "
             + (f"each of the {n_keys} (tree, level) keys of `BicriteriaCenters` buffers its `(tick, update)` "
                f"elements the same way — counter updates of {wtxt} integers per tick, no points: "
                f"{mlb['bytes']:,} bytes ({mlb['bytes'] / MB:.0f} MB) for all keys. " if bic else
                "the job has no bicriteria stages (`bicriteria` is off in this configuration). ")
             + f"Peak RSS: job {job['rss_mb']:.0f} MB, job without sinks {fc['rss_mb']:.0f} MB, read + parse "
             f"+ ticks {ft['rss_mb']:.0f} MB, floor {fp['rss_mb']:.0f} MB | grow with n |")
    L.append("")

    v = SimpleNamespace(n=n, d=d, k=k, T=T, empty=empty, fr=fr, fp=fp, ft=ft, fc=fc, job=job, eng=eng, micro=micro,
                        mp=mp, ma=ma, mm=mm, mlu=mlu, mli=mli, mls=mls, mreg=mreg, mee=mee, mes=mes, mb=mb, mlb=mlb,
                        n_keys=n_keys, wtxt=wtxt, bic=bic)
    lines, v.ours_total = time_split(res, v)
    L += lines + profile_section(args, res) + reading(res, v)
    return "\n".join(L)
