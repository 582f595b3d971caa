"""The release log (dpstream/release_log.py): a release repeating the previous tick's coreset refers to
it, and read_releases gives every release back whole, from a log or from a file of full releases."""
from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest

from dpstream import Release, read_releases
from dpstream.params import EngineConfig
from dpstream.release_log import LOG_FIELDS, SAME_AS, ReleaseLog, resolve, same_coreset, write_releases
from dpstream.runs import RunSequence

SEED = b"release-log-tests-fixed-seed-32b"


def _releases(runs=1, T=30, n_per_tick=60):
    """Releases of a small stream in tick order (global ticks 1..runs·T); most re-release a coreset."""
    rng = np.random.default_rng(4)
    cfg = EngineConfig(n_clusters=3, dim=2, radius=10.0, epsilon=1.0, delta=1e-6, horizon_ticks=T, runs=runs)
    seq = RunSequence(cfg, SEED)
    means = np.array([[4.0, 4.0], [-4.0, 3.0], [1.0, -5.0]])
    return [seq.step(means[rng.integers(0, 3, n_per_tick)] + rng.normal(scale=0.6, size=(n_per_tick, 2)))
            for _ in range(runs * T)]


@pytest.fixture(scope="module")
def rels():
    return _releases(runs=2, T=30)


def test_a_repeated_coreset_refers_to_the_line_that_holds_it(rels):
    log = ReleaseLog()
    lines = [json.loads(log.line(r)) for r in rels]
    refs = [d for d in lines if SAME_AS in d]
    assert len(refs) >= len(rels) // 3  # the stream re-releases coresets on many ticks
    by = {(d["run"], d["tick"]): d for d in lines}
    for i, (r, d) in enumerate(zip(rels, lines)):
        prev = rels[i - 1] if i else None
        repeats = prev is not None and prev.run == r.run and \
            np.array_equal(prev.coreset_points, r.coreset_points) and \
            np.array_equal(prev.coreset_weights, r.coreset_weights)
        assert (SAME_AS in d) == repeats, (r.run, r.tick)
        if repeats:
            assert tuple(d) == LOG_FIELDS
            anchor = by[(r.run, d[SAME_AS])]
            assert SAME_AS not in anchor and anchor["coreset_points"] == r.coreset_points.tolist()
            assert anchor["coreset_weights"] == r.coreset_weights.tolist()
            assert {k: v for k, v in d.items() if k != SAME_AS} == \
                {k: v for k, v in r.to_dict().items() if not k.startswith("coreset_")}
        else:
            assert d == json.loads(json.dumps(r.to_dict()))
    first = [d for d in lines if d["tick"] == 1]
    assert len(first) == 2 and all(SAME_AS not in d for d in first)  # every run starts with its coreset


def test_read_releases_resolves_a_log_in_any_line_order(tmp_path, rels):
    path = tmp_path / "releases.jsonl"
    assert write_releases(rels, str(path)) == len(rels)
    lines = path.read_text().splitlines()
    random.Random(0).shuffle(lines)  # a Beam sink keeps no order
    path.write_text("\n".join(lines) + "\n")
    got = list(read_releases(path))
    assert [r.to_dict() for r in got] == [json.loads(json.dumps(r.to_dict())) for r in rels]
    assert sum(len(x) for x in lines) < sum(len(json.dumps(r.to_dict())) for r in rels)


def test_read_releases_still_reads_a_file_of_full_releases(tmp_path, rels):
    path = tmp_path / "releases.jsonl"
    path.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in rels))
    assert [r.to_dict() for r in read_releases(path)] == [json.loads(json.dumps(r.to_dict())) for r in rels]


def test_a_reference_without_its_line_is_an_error_that_says_so(tmp_path, rels):
    log = ReleaseLog()
    lines = [log.line(r) for r in rels[:30]]
    ref = next(i for i, x in enumerate(lines) if SAME_AS in x)
    anchor = json.loads(lines[ref])[SAME_AS]
    kept = [x for x in lines if json.loads(x)["tick"] != anchor]
    (tmp_path / "r.jsonl").write_text("\n".join(kept) + "\n")
    with pytest.raises(ValueError, match=f"coreset of tick {anchor}, which this log does not hold"):
        list(read_releases(tmp_path / "r.jsonl"))
    with pytest.raises(ValueError, match="read_releases"):
        Release.from_dict(json.loads(lines[ref]))


def test_equal_means_bit_for_bit():
    p = np.array([[0.0, 1.0]])
    w = np.array([3])
    assert same_coreset(p, w, p.copy(), np.array([3], dtype=np.int32))
    assert not same_coreset(p, w, np.array([[-0.0, 1.0]]), w)  # their JSON differs: 0.0 vs -0.0
    assert not same_coreset(p, w, p, np.array([4]))
    assert not same_coreset(p, w, np.zeros((0, 2)), np.zeros(0, dtype=np.int64))
    assert same_coreset(np.zeros((0, 2)), np.zeros(0), np.zeros((0, 2)), np.zeros(0, dtype=np.int64))


def test_a_new_run_starts_with_its_coreset_even_when_it_equals_the_last_one(rels):
    last = rels[29]
    again = dataclasses.replace(rels[30], coreset_points=last.coreset_points, coreset_weights=last.coreset_weights)
    log = ReleaseLog()
    log.line(last)
    assert SAME_AS not in json.loads(log.line(again))  # run 1, tick 1: no reference into run 0


def test_resolve_passes_lines_that_are_not_references_through():
    full = {"tick": 1, "run": 0, "coreset_points": [[1.0]], "coreset_weights": [2]}
    ref = {"tick": 2, "run": 0, SAME_AS: 1, "epoch": 0}
    other = {"reason": "non_numeric"}
    out = dict(resolve([ref, other, full]))
    assert out[1] is other and out[2] is full
    assert out[0] == {"tick": 2, "run": 0, "coreset_points": [[1.0]], "coreset_weights": [2], "epoch": 0}
