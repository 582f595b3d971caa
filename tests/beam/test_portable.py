"""The portable path Flink, Spark and Dataflow Runner v2 take (the pipeline as a proto → a job service →
an SDK harness running the DoFns): the batch job on ``--runner=PortableRunner --job_endpoint=embed
--environment_type=LOOPBACK`` (Beam's in-process job service, its workers in this process) writes the
same bytes as on the DirectRunner, releases and dead letters, from a CSV file. A stage whose output
depended on the runner's bundling, element order or fusion, or a value that does not survive the
portable coders, would show here."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                    exc_type=ImportError)

from pipelines import dp_stream_cluster as job_mod  # noqa: E402

PORTABLE = ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"]
N, TICK = 2_400, 200  # 12 ticks: three epochs of the schedule, a few seconds per runner


def _csv(path):
    rng = np.random.default_rng(3)
    means = np.array([[-5.0, -5.0], [5.0, 5.0], [5.0, -5.0]])
    X = means[rng.integers(0, 3, N)] + rng.normal(scale=0.7, size=(N, 2))
    lines = ["x0,x1"] + [f"{a!r},{b!r}" for a, b in X.tolist()]
    lines[7] = "not,a number"  # a dead letter keeps its slot on both runners
    path.write_text("\n".join(lines) + "\n")


def _run(tmp_path, name, seed, extra):
    out = tmp_path / name
    argv = [f"--input={tmp_path / 'points.csv'}", "--csv_header", "--dim=2", "--radius=12", "--k=3",
            f"--tick_size={TICK}", f"--horizon_ticks={N // TICK}", f"--output={out}", f"--seed_file={seed}",
            f"--seed_registry={tmp_path / 'registry.jsonl'}", *extra]
    result = job_mod.run(argv)
    assert "DONE" in str(result.state), result.state
    return (out / "releases.jsonl").read_bytes(), (out / "non_private" / "dead_letter.jsonl").read_bytes()


def test_the_portable_runner_releases_byte_identically_to_the_direct_runner(tmp_path):
    _csv(tmp_path / "points.csv")
    seed = tmp_path / "seed"
    seed.write_text("9e1f0e2c9a8d4c3e9f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6071\n")
    direct, direct_dead = _run(tmp_path, "direct", seed, ["--runner=DirectRunner"])
    assert direct.count(b"\n") == N // TICK and direct_dead.count(b"\n") == 1
    portable, portable_dead = _run(tmp_path, "portable", seed, PORTABLE)
    assert portable == direct
    assert portable_dead == direct_dead
