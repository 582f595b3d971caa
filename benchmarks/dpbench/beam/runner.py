"""The parent's side: one fresh child process per timed run, and which code was measured."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from .common import CLI, REPO


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
    proc = subprocess.run([sys.executable, str(CLI), "--_stage", name, "--_ctx", ctx_path,
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

