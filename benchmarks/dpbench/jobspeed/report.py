"""The targets and the Markdown report (``job_vs_library.md``)."""
from __future__ import annotations

import json
import os
import statistics

JOB_OVER_LIBRARY = 2.0   # job wall / library wall, each in a fresh process with its imports
IMPORT_S = 1.5           # python -c "import dpstream"
HELP_S = 2.0             # python -m pipelines.dp_stream_cluster --help
OUTPUT_FRACTION = 0.25   # releases.jsonl bytes / the same releases written whole (today's format)


def verdict(value: float, target: float) -> str:
    if value != value:  # NaN: not measured
        return "n/a"
    return "PASS" if value <= target else f"MISS (+{value - target:.2f})"


def release_bytes(out_dir: str):
    """(bytes of releases.jsonl, of the same releases as the log's first format (references to a
    repeated coreset only), of the same releases written whole, number of releases): the whole lines
    are ``json.dumps(release.to_dict())``, what every line held before the release log."""
    from dpstream.release import Release
    from dpstream.release_log import ReleaseLog, resolve

    path = os.path.join(out_dir, "releases.jsonl")
    with open(path, encoding="utf-8") as fh:
        lines = [ln for ln in fh.read().splitlines() if ln.strip()]
    whole = sorted((d for _, d in resolve([json.loads(ln) for ln in lines])), key=lambda d: (d["run"], d["tick"]))
    full = sum(len(json.dumps(d).encode()) + 1 for d in whole)
    first = ReleaseLog(ids=False)
    refs = sum(len(first.line(Release.from_dict(d)).encode()) + 1 for d in whole)
    return os.path.getsize(path), refs, full, len(lines)


def render(rows, imports, helps, python_s, sizes, meta, profile_md: str = "") -> str:
    out = ["# The Beam job against the library (`benchmarks/job_vs_library.py`)", "",
           f"{meta}", "",
           "Each side in a fresh `python` on the same file, wall clock from spawn to exit (imports included), "
           "BLAS/OpenMP limited to one thread, numpy's huge-page advice off on both sides (`NUMPY_MADVISE_HUGEPAGE=0`; the job's command sets it for its own run). The job: `python -m pipelines.dp_stream_cluster --input FILE "
           "--output DIR …` (DirectRunner); the library: `np.load` / `np.loadtxt` then "
           "`DPStreamClusterer(k, radius, tick_size=1000).fit(X)`. CPU = the child's user + system time.", "",
           "| data | library wall (CPU) | job wall (CPU) | job / library, wall | target ≤ 2× | job / library, "
           "CPU (median of rounds) | target ≤ 2×, CPU | CPU ratio of each round |",
           "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        name, lib, job = row[:3]
        ok = lib.ok and job.ok
        ratio = job.wall / lib.wall if ok else float("nan")
        per_round = row[3] if len(row) > 3 else ([job.cpu / lib.cpu] if ok else [])
        cpu_ratio = statistics.median(per_round) if per_round else float("nan")
        fail = "" if ok else " (a run failed)"
        out.append(f"| {name} | {lib.wall:.1f} s ({lib.cpu:.1f} s) | {job.wall:.1f} s ({job.cpu:.1f} s) | "
                   f"{ratio:.2f}×{fail} | {verdict(ratio, JOB_OVER_LIBRARY)} | {cpu_ratio:.2f}× | "
                   f"{verdict(cpu_ratio, JOB_OVER_LIBRARY)} | {', '.join(f'{r:.2f}' for r in per_round)} |")
    out += ["", "| start-up (median of runs) | wall | CPU | target (wall) | |", "|---|---|---|---|---|",
            f"| `python -c pass` | {python_s[0]:.2f} s | {python_s[1]:.2f} s | | |",
            f"| `python -c \"import dpstream\"` | {imports[0]:.2f} s | {imports[1]:.2f} s | ≤ {IMPORT_S} s | "
            f"{verdict(imports[0], IMPORT_S)} |",
            f"| `python -m pipelines.dp_stream_cluster --help` | {helps[0]:.2f} s | {helps[1]:.2f} s | ≤ {HELP_S} s | "
            f"{verdict(helps[0], HELP_S)} |", ""]
    if sizes:
        out += ["| releases.jsonl | the same releases whole | references only (first log format) | release log "
                "(references and ids) | log / whole | target ≤ 25% |", "|---|---|---|---|---|---|"]
        for name, (log_b, refs_b, full_b, n) in sizes.items():
            frac = log_b / full_b
            out.append(f"| {name} ({n} releases) | {full_b / 1e6:.1f} MB | {refs_b / 1e6:.1f} MB "
                       f"({100 * refs_b / full_b:.0f}%) | {log_b / 1e6:.1f} MB | {100 * frac:.1f}% | "
                       f"{verdict(frac, OUTPUT_FRACTION)} |")
        out += ["", "The whole lines are what every line held before the release log (`--full_coresets` "
                "writes them); `read_releases` gives the same releases from all three (docs/release-log.md).", ""]
    if profile_md:
        out += ["## Profile", "", profile_md]
    return "\n".join(out) + "\n"
