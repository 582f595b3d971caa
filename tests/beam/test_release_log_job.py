"""The job's releases.jsonl is the release log the library writes (dpstream.release_log.write_releases)
for the same releases, byte for byte line by line, and reads back to them; with --full_coresets every
line is the full release."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                    exc_type=ImportError)

from dpstream import read_releases  # noqa: E402
from dpstream import rules  # noqa: E402
from dpstream.release_log import IDS, ROWS, SAME_AS, write_releases  # noqa: E402
from dpstream.runs import RunSequence  # noqa: E402
from pipelines import dp_stream_cluster as job_mod  # noqa: E402
from transforms.cluster import load_seed  # noqa: E402


@pytest.fixture
def seed_file(tmp_path):
    p = tmp_path / "seed"
    p.write_text("5e3c1f0a9b8d7c6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f\n")
    return str(p)


def _library(argv, seed_file, X, tick_size):
    job, _ = job_mod.parse_args(argv)
    seq = RunSequence(job_mod.engine_config(job), load_seed(seed_file))
    return [seq.step(X[t * tick_size:(t + 1) * tick_size]) for t in range(job.total_ticks)]


def _order(line):
    d = json.loads(line)
    return d["run"], d["tick"]


@pytest.mark.parametrize("full,sampled", [(False, False), (True, False), (False, True)])
def test_job_writes_the_library_release_log(tmp_path, seed_file, full, sampled, monkeypatch):
    n, T, size = (1100, 8, 100) if not sampled else (4000, 16, 125)
    if sampled:  # B's coreset size cut to 8: new coresets are samples that re-draw released points
        monkeypatch.setattr(rules, "coreset_size", lambda k, d: 8)
    rng = np.random.default_rng(8)
    X = rng.normal(scale=3.0, size=(n, 2))  # ticks past the data's end re-release their coreset
    np.save(tmp_path / "a.npy", X)
    out = tmp_path / "out"
    argv = [f"--input={tmp_path}/a.npy", f"--output={out}", "--dim=2", "--radius=12", "--k=3", f"--tick_size={size}",
            f"--horizon_ticks={T}", "--runs=2", f"--seed_file={seed_file}"] + (["--full_coresets"] if full else [])
    assert "DONE" in str(job_mod.run(argv).state)
    got = sorted((out / "releases.jsonl").read_text().splitlines(), key=_order)
    rels = _library(argv, seed_file, X, size)
    if full:
        assert got == [json.dumps(r.to_dict()) for r in rels]
        return
    write_releases(rels, str(tmp_path / "lib.jsonl"))
    assert got == (tmp_path / "lib.jsonl").read_text().splitlines()
    assert [r.to_dict() for r in read_releases(out)] == [json.loads(json.dumps(r.to_dict())) for r in rels]
    refs = [json.loads(x) for x in got if SAME_AS in x]
    assert len(refs) >= 4 and {d["run"] for d in refs} == {0, 1}  # ticks 4..8 of run 1 hold no data
    named = [json.loads(x) for x in got if IDS in x]
    assert {d["run"] for d in named} == {0, 1} and not any("coreset_points" in json.loads(x) for x in got)
    reused = sum(len(set(map(str, d[IDS])) - set(d[ROWS])) for d in named)
    # with samples, lines name points that earlier lines wrote (without, a point an earlier coreset held may
    # stay in a later one too: then its line names it as well)
    assert reused > 0 or not sampled
