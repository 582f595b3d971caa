"""Several worker processes: the job on the built-in stream under
``--runner=FnApiRunner --direct_running_mode=multi_processing --direct_num_workers=2`` writes
``releases.jsonl`` line for line (in tick order) the bytes one process writes — the library's release log for
the same rows and seed, which the one-worker job's equals (tests/beam/test_release_log_job.py) — with the
batch tick timer and with the looping one, and with the bicriteria stages split over bucket shards;
``multi_threading`` is refused with the measured reason; ``--point_shards`` defaults to 2 on one in-process
worker and 8 otherwise, and out of range is an option error (and so is ``--bucket_shards`` without the bicriteria or out of range); no transform imports the one-process engine (the engine and the job drive the same components)."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                    exc_type=ImportError)

from pipelines import dp_stream_cluster as job_mod  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
N = 12_000  # the built-in stream: 12 ticks of 1000 points (small: four job runs stay well under a minute)


@pytest.fixture(scope="module")
def seed_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("seed") / "seed"
    p.write_text("5b1f0e2c9a8d4c3e9f0a1b2c3d4e5f60718293a4b5c6d7e8f90f1e2d3c4b5a69\n")
    return str(p)


def _releases(out: Path, seed_file: str, extra=()) -> list:
    """The job's release lines in tick order."""
    argv = [f"--output={out}", f"--builtin_n={N}", f"--seed_file={seed_file}", *extra]
    result = job_mod.run(argv)
    assert "DONE" in str(result.state)
    lines = (out / "releases.jsonl").read_text().splitlines()
    assert len(lines) == N // 1000  # one release per tick
    return sorted(lines, key=lambda x: json.loads(x)["tick"])


def _library_lines(tmp_path: Path, seed_file: str, extra=()) -> list:
    """What one process writes for these options: the library's release log of the same rows."""
    from dpstream.datasets import default_stream
    from dpstream.release_log import write_releases
    from dpstream.runs import RunSequence
    from transforms.cluster import load_seed

    job, _ = job_mod.parse_args([f"--output={tmp_path / 'unused'}", f"--builtin_n={N}", *extra])
    seq = RunSequence(job_mod.engine_config(job), load_seed(seed_file))
    X = default_stream(N)[0]
    write_releases((seq.step(X[s:s + 1000]) for s in range(0, N, 1000)), str(tmp_path / "lib.jsonl"))
    return (tmp_path / "lib.jsonl").read_text().splitlines()


MULTI = ["--runner=FnApiRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2"]


@pytest.mark.parametrize("timer, extra", [("batch", []), ("looping", []),
                                          ("batch", ["--semicoreset=snap", "--bucket_shards=3"])])
def test_two_worker_processes_release_byte_identical_to_one(tmp_path, seed_file, timer, extra):
    two = _releases(tmp_path / "two", seed_file, [f"--tick_timer={timer}", *extra, *MULTI])
    assert two == _library_lines(tmp_path, seed_file, extra)


@pytest.mark.parametrize("argv, message", [
    (["--runner=FnApiRunner", "--direct_running_mode=multi_threading", "--direct_num_workers=2"],
     "fires looping tick timers twice or hangs"),
    (["--direct_running_mode=multi_threading"], "fires looping tick timers twice or hangs"),
    (["--direct_num_workers=2"], "needs --runner=FnApiRunner --direct_running_mode=multi_processing"),
    (["--direct_running_mode=multi_processing", "--direct_num_workers=2"], "--runner=FnApiRunner named explicitly"),
    (["--point_shards=0"], "--point_shards must be an integer in [1, 4096]"),
    (["--point_shards=4097"], "--point_shards must be an integer in [1, 4096]"),
    (["--bucket_shards=2"], "--bucket_shards splits the BicriteriaCenters stage, which runs only with --semicoreset"),
    (["--semicoreset=snap", "--bucket_shards=0"], "--bucket_shards must be an integer in [1, 4·k = 20]"),
    (["--semicoreset=snap", "--k=2", "--bucket_shards=9"], "--bucket_shards must be an integer in [1, 4·k = 8]"),
])
def test_refused_worker_modes_and_shard_counts_say_why(argv, message, capsys):
    assert job_mod.main(["--output=o", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_multi_processing_is_accepted(tmp_path):
    job, beam_args = job_mod.parse_args([f"--output={tmp_path}", *MULTI])
    assert "--direct_running_mode=multi_processing" in beam_args


def test_point_shards_default_to_two_on_one_in_process_worker_and_eight_where_workers_run_side_by_side(tmp_path):
    """One in-process worker visits every key in turn, so it gets two shards (a stream too); several local
    worker processes and a remote runner get DEFAULT_POINT_SHARDS; an explicit --point_shards always wins."""
    def shards(*argv):
        return job_mod.parse_args([f"--output={tmp_path}", *argv])[0].point_shards

    assert shards() == job_mod.IN_PROCESS_POINT_SHARDS == 2
    assert shards("--runner=FnApiRunner") == 2
    stream = ["--input_subscription=projects/p/subscriptions/s", "--dim=2", "--radius=12", "--tick_seconds=10",
              "--horizon_ticks=8"]
    assert shards(*stream) == 2  # the BundleBasedDirectRunner
    assert shards(*MULTI) == job_mod.DEFAULT_POINT_SHARDS == 8
    remote = ["--runner=DataflowRunner", "--seed_file=gs://b/seed", "--seed_registry=gs://b/registry.jsonl"]
    assert shards(*remote) == 8
    assert shards("--point_shards=3") == 3 and shards(*MULTI, "--point_shards=2") == 2


def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:  # relative: transforms/x.py → transforms.<mod>
                mod = "transforms." + mod if mod else "transforms"
            yield mod
            yield from (f"{mod}.{a.name}" for a in node.names)


def test_no_transform_imports_the_engine():
    files = sorted((ROOT / "transforms").glob("*.py"))
    assert files
    bad = {f.name: m for f in files for m in _imports(f) if m == "dpstream.engine" or m.startswith("dpstream.engine.")}
    assert not bad, f"transforms import the one-process engine: {bad}"
    for f in files:  # nor through importlib / __import__ with a literal name
        lits = {n.value for n in ast.walk(ast.parse(f.read_text(encoding="utf-8"))) if isinstance(n, ast.Constant)}
        assert "dpstream.engine" not in lits, f.name
