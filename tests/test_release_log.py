"""The release log (dpstream/release_log.py): a release repeating the previous tick's coreset refers to
it, a new coreset names its points by id (each point written once per run), and read_releases gives
every release back whole, from a log, from the log's first format or from a file of full releases."""
from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest

from dpstream import Release, read_releases
from dpstream.params import EngineConfig
from dpstream.release import RELEASE_FIELDS
from dpstream.release_log import (ID_FIELDS, IDS, LOG_FIELDS, ROWS, SAME_AS, ReleaseLog, RowTable, resolve,
                                  same_coreset, write_releases)
from dpstream.runs import RunSequence

SEED = b"release-log-tests-fixed-seed-32b"


def _releases(runs=1, T=30, n_per_tick=60, **kw):
    """Releases of a small stream in tick order (global ticks 1..runs·T); most re-release a coreset."""
    rng = np.random.default_rng(4)
    cfg = EngineConfig(n_clusters=3, dim=2, radius=10.0, epsilon=1.0, delta=1e-6, horizon_ticks=T, runs=runs, **kw)
    seq = RunSequence(cfg, SEED)
    means = np.array([[4.0, 4.0], [-4.0, 3.0], [1.0, -5.0]])
    return [seq.step(means[rng.integers(0, 3, n_per_tick)] + rng.normal(scale=0.6, size=(n_per_tick, 2)))
            for _ in range(runs * T)]


@pytest.fixture(scope="module")
def rels():
    return _releases(runs=2, T=30)


@pytest.fixture(scope="module")
def sampled():
    """Releases whose coresets are B's samples of a larger union (the regime of long streams)."""
    return _releases(runs=2, T=30, n_per_tick=400, coreset_size=10)


def test_a_repeated_coreset_refers_to_the_line_that_holds_it(rels):
    log = ReleaseLog()
    lines = [json.loads(log.line(r)) for r in rels]
    refs = [d for d in lines if SAME_AS in d]
    assert len(refs) >= len(rels) // 3  # the stream re-releases coresets on many ticks
    by = {(d["run"], d["tick"]): (d, whole) for d, (_, whole) in zip(lines, resolve(lines))}
    for i, (r, d) in enumerate(zip(rels, lines)):
        prev = rels[i - 1] if i else None
        repeats = prev is not None and prev.run == r.run and \
            np.array_equal(prev.coreset_points, r.coreset_points) and \
            np.array_equal(prev.coreset_weights, r.coreset_weights)
        assert (SAME_AS in d) == repeats, (r.run, r.tick)
        if repeats:
            assert tuple(d) == LOG_FIELDS
            anchor, whole = by[(r.run, d[SAME_AS])]
            assert SAME_AS not in anchor and whole["coreset_points"] == r.coreset_points.tolist()
            assert anchor["coreset_weights"] == r.coreset_weights.tolist()
            assert {k: v for k, v in d.items() if k != SAME_AS} == \
                {k: v for k, v in r.to_dict().items() if not k.startswith("coreset_")}
        else:
            assert tuple(d) == ID_FIELDS
            assert {k: v for k, v in d.items() if k not in (IDS, ROWS)} == \
                {k: v for k, v in json.loads(json.dumps(r.to_dict())).items() if k != "coreset_points"}
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


def test_a_new_coreset_names_its_points_by_id_and_each_point_is_written_once_per_run(sampled):
    log = ReleaseLog()
    lines = [json.loads(log.line(r)) for r in sampled]
    table, written, used = {}, 0, 0
    for r, d in zip(sampled, lines):
        if IDS not in d:
            continue
        for i, row in d[ROWS].items():  # in tick order, a line defines exactly the ids it is the first to use
            assert (r.run, int(i)) not in table
            table[(r.run, int(i))] = row
        assert {i for i in d[IDS] if str(i) in d[ROWS]} == {int(i) for i in d[ROWS]}
        assert [table[(r.run, i)] for i in d[IDS]] == r.coreset_points.tolist()
        written, used = written + len(d[ROWS]), used + len(d[IDS])
    assert written < 0.6 * used  # new coresets re-draw points the run already released
    assert {run for run, _ in table} == {0, 1} and min(i for run, i in table if run == 1) == 0  # ids per run


def _rel_dicts(rs):
    return [json.loads(json.dumps(r.to_dict())) for r in rs]


@pytest.mark.parametrize("fmt", ["full", "references", "ids"])
def test_every_format_reads_back_to_the_same_release_objects(tmp_path, sampled, fmt):
    rels = sampled
    path = tmp_path / "releases.jsonl"
    if fmt == "full":  # files written before the release log, and --full_coresets
        path.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in rels))
    else:  # the log's first format (references only), and today's
        write_releases(rels, str(path), ids=fmt == "ids")
    got = list(read_releases(path))
    assert [r.to_dict() for r in got] == _rel_dicts(rels)
    for a, b in zip(got, rels):
        for f in ("centers", "coreset_points", "coreset_weights", "window_centers"):
            x, y = getattr(a, f), getattr(b, f)
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), f
    dicts = [json.loads(x) for x in path.read_text().splitlines()]
    assert [Release.from_dict(d).to_dict() for _, d in resolve(dicts)] == _rel_dicts(rels)


def test_the_ids_format_is_smaller_than_the_references_alone(tmp_path, sampled):
    """(The sizes at scale are the benchmark's: benchmarks/job_vs_library.py.)"""
    write_releases(sampled, str(tmp_path / "ids.jsonl"))
    write_releases(sampled, str(tmp_path / "refs.jsonl"), ids=False)
    assert (tmp_path / "ids.jsonl").stat().st_size < (tmp_path / "refs.jsonl").stat().st_size
    ids = [json.loads(x) for x in (tmp_path / "ids.jsonl").read_text().splitlines()]
    refs = [json.loads(x) for x in (tmp_path / "refs.jsonl").read_text().splitlines()]
    points = sum(len(json.dumps(d["coreset_points"])) for d in refs if "coreset_points" in d)
    named = sum(len(json.dumps(d[IDS])) + len(json.dumps(d[ROWS])) for d in ids if IDS in d)
    assert named < 0.7 * points


def test_a_reader_that_starts_mid_file_gets_an_error_that_says_why(tmp_path, sampled):
    log = ReleaseLog()
    lines = [log.line(r) for r in sampled[:30]]
    dicts = [json.loads(x) for x in lines]
    # the first line whose coreset re-uses a point an earlier line wrote: a reader starting there
    cut = next(j for j, d in enumerate(dicts) if IDS in d and set(map(str, d[IDS])) - set(d[ROWS]))
    (tmp_path / "tail.jsonl").write_text("\n".join(lines[cut:]) + "\n")
    with pytest.raises(ValueError, match="which this log does not hold: .*cut short|which no line of this log holds"):
        list(read_releases(tmp_path / "tail.jsonl"))
    (tmp_path / "ids.jsonl").write_text("".join(x + "\n" for x, d in zip(lines[cut:], dicts[cut:]) if IDS in d))
    with pytest.raises(ValueError, match=f"tick {dicts[cut]['tick']} names coreset point .*, which no line of this "
                                         f"log holds: .*cut short"):
        list(read_releases(tmp_path / "ids.jsonl"))


def test_a_file_cut_short_inside_a_line_is_an_error_that_says_so(tmp_path, sampled):
    rels = sampled
    log = ReleaseLog()
    text = "".join(log.line(r) + "\n" for r in rels[:12])
    (tmp_path / "cut.jsonl").write_text(text[:-40])
    with pytest.raises(ValueError, match=r"line 12: not a dpstream release \(the file ends inside it"):
        list(read_releases(tmp_path / "cut.jsonl"))
    (tmp_path / "whole.jsonl").write_text(text)  # the whole lines before the cut still read
    assert [r.to_dict() for r in read_releases(tmp_path / "whole.jsonl")] == _rel_dicts(rels[:12])


def test_two_logs_mixed_in_one_file_are_an_error(sampled):
    r = next(r for r in sampled if len(r.coreset_points))
    a = json.loads(ReleaseLog().line(r))
    b = json.loads(ReleaseLog().line(dataclasses.replace(r, tick=r.tick + 1, coreset_points=r.coreset_points + 1.0)))
    with pytest.raises(ValueError, match="mixes two logs"):
        list(resolve([a, b]))


def test_a_line_with_ids_is_not_a_release_on_its_own():
    d = {"tick": 3, "run": 0, IDS: [0, 1], ROWS: {}, "coreset_weights": [1, 2]}
    with pytest.raises(ValueError, match="read_releases"):
        Release.from_dict(d)


def test_the_row_table_is_bounded_and_never_gives_an_id_to_two_points():
    rng = np.random.default_rng(0)
    tab = RowTable(run=0, max_floats=40)  # d = 2: 20 points at most
    seen, pool = {}, rng.normal(size=(30, 2))
    pool[1] = [-0.0, 0.5]
    pool[2] = [0.0, 0.5]  # equal as numbers, not as text: two ids
    for _ in range(20):
        pts = pool[rng.choice(30, 8, replace=False)]
        ids, rows = tab.encode(pts)
        for i, row in rows.items():
            assert int(i) not in seen  # ids only grow
            seen[int(i)] = row
        assert [seen[i] for i in ids] == pts.tolist()
        assert 0 < tab.state_floats() <= 40
    assert len(seen) > 30  # the table forgot, and wrote points again under new ids
    a, _ = tab.encode(pool[[1, 2]])
    assert a[0] != a[1]
    assert tab.encode(np.zeros((0, 2))) == ([], {})


def test_the_docs_reader_without_dpstream_gives_the_whole_releases(tmp_path, sampled):
    """docs/release-log.md's reader in plain json: what a consumer in any language does."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "release-log.md").read_text()
    block = text.split("Without dpstream")[1].split("```python\n")[1].split("```")[0]
    ns = {}
    exec(block, ns)
    path = tmp_path / "releases.jsonl"
    write_releases(sampled, str(path))
    lines = path.read_text().splitlines()
    random.Random(1).shuffle(lines)
    path.write_text("\n".join(lines) + "\n")
    got = ns["whole_releases"](str(path))
    assert [{k: d[k] for k in RELEASE_FIELDS} for d in got] == _rel_dicts(sampled)
