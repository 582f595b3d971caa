"""beam.md, second half: where the job's time goes (nested pipelines and the job's own code), the
profile, and what bounds the ratios."""
from __future__ import annotations

from .common import CHEAP_STAGES, MB, TARGET_FLOOR_RATIO
from .runner import fmt_rate


def time_split(res, v):
    """The stage table and the per-element paragraph; returns (lines, our code's total CPU)."""
    n, T, empty, fr, fp, ft, fc, job, eng, micro = v.n, v.T, v.empty, v.fr, v.fp, v.ft, v.fc, v.job, v.eng, v.micro
    mp, ma, mm, mlu, mli, mls, mreg = v.mp, v.ma, v.mm, v.mlu, v.mli, v.mls, v.mreg
    mee, mes, mb, mlb, n_keys, wtxt, bic = v.mee, v.mes, v.mb, v.mlb, v.n_keys, v.wtxt, v.bic
    L = []
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
         (cluster_ours, (f"`_LevelUpdatesFn` {mlu['cpu']:.1f} s + level keys' construction {mli['cpu']:.1f} s and "
                         f"steps {mls['cpu']:.1f} s + `CenterSet.absorb` {mreg['cpu']:.2f} s + engine without "
                         f"bicriteria " if bic else "engine ") +
          f"{mee['cpu']:.1f} s + `to_dict` {mee['to_dict_cpu']:.1f} s + bag pickle in/out "
          f"{mb['cpu'] + mlb['cpu']:.1f} s + engine state {mes['cpu']:.2f} s")),
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
    per = (f"Per element, in our code: `ParsePointsFn.process` {mp['cpu'] / n_rec * 1e3:.1f} ms per 8192-row "
           f"record ({mp['cpu'] / n * 1e9:.0f} ns per point: one float64 copy, a row-wise `isfinite`, one "
           f"`ParsedBatch`); `_AssignTicksFn` {ma['cpu'] / n_rec * 1e3:.1f} ms per batch including its flushes "
           f"(array operations: ticks from slots, one stable sort per flush of ≤ {ma['max_buffer']:,} points, "
           f"{ma['partials']:,} partial batches for {T:,} ticks); `merge_partials` {mm['cpu'] / T * 1e3:.2f} ms per "
           f"tick; ")
    if bic:
        per += (f"`_LevelUpdatesFn` {mlu['cpu'] / T * 1e3:.2f} ms per tick batch for its {n_keys} (tree, level) "
                f"keys (clip, cell ids, bucket histograms), which then shuffle {mlu['elements']:,} updates of "
                f"{wtxt} integers ({mlu['bytes'] / MB:.0f} MB pickled) instead of points; each level key's "
                f"`step_update` (binary-mechanism noise and heavy-hitter decoding) "
                f"{mls['cpu'] / max(1, n_keys * T) * 1e3:.2f} ms per tick; the engine without its bicriteria "
                f"{mee['step_cpu'] / T * 1e3:.1f} ms per tick. Called in this order, the split path {same_txt}. Its "
                f"bicriteria per tick (updates + level steps + registry: {bic_steps:.1f} s, plus {mli['cpu']:.1f} s "
                f"to build the {n_keys} level keys' privacy plans and counters) compares with {eng_bic:.1f} s inside "
                f"the engine alone (`step` {eng['step_cpu']:.1f} s − `step` without bicriteria "
                f"{mee['step_cpu']:.1f} s). ")
    else:
        per += (f"the engine as `ClusterTicks` steps it {mee['step_cpu'] / T * 1e3:.1f} ms per tick (no bicriteria "
                f"stages: `bicriteria` is off in this configuration). Called in this order, the split path "
                f"{same_txt}. ")
    per += (f"The release JSON is {eng['json_bytes'] / MB:.0f} MB: the coreset points are "
            f"{100 * eng['coreset_json_bytes'] / max(1, eng['json_bytes']):.0f}% of it, the privacy plan "
            f"{100 * eng['privacy_json_bytes'] / max(1, eng['json_bytes']):.0f}%, and {eng['repeated_coresets']:,} "
            f"of {T:,} releases repeat the previous tick's coreset (the engine re-releases its cached coreset when "
            f"no DP output changed).\n")
    L.append(per)
    return L, ours_total


def profile_section(args, res):
    L = []
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

    return L


def reading(res, v):
    """What bounds job / floor, Beam's own work, serialisation, the single key, the batch-mode buffers."""
    n, T, empty, fp, ft, fc, job, eng = v.n, v.T, v.empty, v.fp, v.ft, v.fc, v.job, v.eng
    mee, mb, mlb, n_keys, bic = v.mee, v.mb, v.mlb, v.n_keys, v.bic
    jc, ours_total = job["cpu"], v.ours_total
    prof = res.get("job_profile")
    L = []
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
    L.append(("* **One key for the rest of Alg. 1.** The bicriteria already runs as {n_keys} (tree, level) keys fed "
              "by a stateless per-batch step, but rings".format(n_keys=n_keys) if bic else
              "* **One key for Alg. 1.** Without the bicriteria stages, rings") +
             f", DP-Merge-Reduce and the release (sensitivity sample and "
             f"k-means of the coreset) stay under `ClusterTicks`' single key ({mee['cpu']:.1f} s CPU here, "
             f"{fmt_rate(n / max(mee['step_cpu'], 1e-9))} points per CPU second in `step`): ring centers come from "
             f"the previous release, a loop (docs/beam-job-plan.md). On the DirectRunner, which must keep "
             f"`--direct_num_workers=1`, nothing runs in parallel anyway.")
    L.append(f"* **Batch-mode buffers.** Holding every tick until the single firing costs "
             f"{mb['bytes'] / MB:.0f} MB of bag state in `ClusterTicks`"
             + (f" and {mlb['bytes'] / MB:.0f} MB in the level keys" if bic else "") +
             f" (peak RSS {job['rss_mb']:.0f} MB vs {fc['rss_mb']:.0f} MB without the sinks and "
             f"{fp['rss_mb']:.0f} MB for the floor). On the FnApiRunner the GroupByKey's output is materialised before "
             f"the stateful stage runs anyway, so this is inherent to the runner; on a streaming runner the "
             f"looping-timer mode keeps only the ticks awaiting their timer (each firing then pays a state round "
             f"trip of the engine: ≈ {(eng['pickle_wall'] + eng['unpickle_wall']) * 1e3:.0f} ms here for the whole "
             f"engine, {T:,} × that = {T * (eng['pickle_wall'] + eng['unpickle_wall']):.1f} s per run).")
    L.append("")
    return L

