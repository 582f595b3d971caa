"""The command's process ends without the interpreter's teardown after a local batch run
(pipelines/job/process_end.py), and still does what an exit must: its atexit handlers run (the temporary seed
and Beam folders are removed), stdout and stderr are flushed, the exit code is main's."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("apache_beam", exc_type=ImportError)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env(tmp):
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["DPSTREAM_SEED_REGISTRY"] = str(tmp / "registry.jsonl")
    return env


def test_end_process_runs_atexit_handlers_flushes_and_keeps_the_code(tmp_path):
    code = ("import atexit, sys\natexit.register(lambda: print('handler ran'))\n"
            "sys.stdout.write('buffered, no newline; ')\nsys.stderr.write('err buffered')\n"
            "from pipelines.job.process_end import end_process\nend_process(3)\nprint('never')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(tmp_path), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 3
    assert out.stdout == "buffered, no newline; handler ran\n"
    assert out.stderr == "err buffered"


def test_the_command_ends_a_local_batch_run_with_its_outputs_summary_and_temporary_files_gone(tmp_path):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.normal(size=(300, 2)))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    argv = [sys.executable, "-m", "pipelines.dp_stream_cluster", f"--input={tmp_path}/x.npy",
            f"--output={tmp_path}/out", "--dim=2", "--radius=4", "--k=2", "--tick_size=100", "--horizon_ticks=3"]
    out = subprocess.run(argv, cwd=ROOT, env=_env(tmp), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "run summary" in out.stderr and "clustered" in out.stderr  # printed last, before the end
    assert (tmp_path / "out" / "releases.jsonl").read_text().count("\n") == 3
    assert os.listdir(tmp) == []  # the private seed file and Beam's temporary folder: removed at exit


def test_under_a_profiler_the_command_exits_normally_and_the_profile_is_written(tmp_path):
    """``python -m cProfile -m pipelines.dp_stream_cluster`` (the job benchmark's --profile) writes its
    data at the interpreter's exit, which the quick end would skip."""
    np.save(tmp_path / "x.npy", np.random.default_rng(1).normal(size=(100, 2)))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    prof = tmp_path / "job.prof"
    argv = [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "pipelines.dp_stream_cluster",
            f"--input={tmp_path}/x.npy", f"--output={tmp_path}/out", "--dim=2", "--radius=4", "--k=2",
            "--tick_size=100", "--horizon_ticks=1"]
    out = subprocess.run(argv, cwd=ROOT, env=_env(tmp), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert prof.exists() and prof.stat().st_size > 0
