"""The job with a privacy unit (--privacy_id_field): the same releases as the library's bounding and
engine for the same seed, rows and ids (kept records and tick means); a record without an id is
dead-lettered no_privacy_id and keeps its slot; two worker processes release byte-identical output to
one; the rule of the keyed stage equals the library's tick-by-tick rule; option errors."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                    exc_type=ImportError)

from dpstream.contributions import ContributionBounder, unit_keep  # noqa: E402
from dpstream.engine import Engine  # noqa: E402
from pipelines import dp_stream_cluster as job_mod  # noqa: E402
from transforms.cluster import load_seed  # noqa: E402

TICK, T = 100, 8


@pytest.fixture
def seed_file(tmp_path):
    p = tmp_path / "seed"
    p.write_text("0a1f0e2c9a8d4c3e9f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6071\n")
    return str(p)


def _data(n=700, seed=3):
    rng = np.random.default_rng(seed)
    means = np.array([[-5.0, -5.0], [5.0, 5.0], [5.0, -5.0]])
    X = means[rng.integers(0, 3, n)] + rng.normal(scale=0.5, size=(n, 2))
    # heavy-tailed units: a few heavy ids, many light ones, some integer ids; a few rows without an id
    ids = [f"u{int(v)}" if v < 30 else int(v) for v in np.floor(rng.pareto(1.0, n) * 6)]
    no_id = set(rng.choice(n, size=9, replace=False).tolist())
    return X, ids, no_id


def _write(path, X, ids, no_id):
    lines = []
    for i in range(X.shape[0]):
        rec = {"x": X[i].tolist()}
        if i not in no_id:
            rec["user"] = ids[i]
        lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")


def _argv(tmp_path, seed_file, out, extra=()):
    return [f"--input={tmp_path}/in.jsonl", f"--output={out}", "--dim=2", "--radius=12", "--k=3",
            f"--tick_size={TICK}", f"--horizon_ticks={T}", f"--seed_file={seed_file}", "--epsilon=2",
            "--privacy_id_field=user", *extra]


def _library(job, seed_file, X, ids, no_id):
    """The library: each tick's rows that have an id, bounded by ContributionBounder, into the engine."""
    cfg = job_mod.engine_config(job)
    eng = Engine(cfg, load_seed(seed_file))
    b = ContributionBounder(cfg)
    out = []
    for t in range(T):
        rows = [i for i in range(t * TICK, min((t + 1) * TICK, X.shape[0])) if i not in no_id]
        x = b.bound(X[rows].reshape(-1, 2), [ids[i] for i in rows])
        out.append(json.loads(json.dumps(eng.step(x).to_dict())))
    return out


def _read(path):
    """The file's dicts, release-log references resolved (a release repeating the previous tick's
    coreset names that tick instead of repeating the arrays)."""
    from dpstream.release_log import resolve
    with open(path) as fh:
        dicts = [json.loads(line) for line in fh if line.strip()]
    return [d for _, d in resolve(dicts)]


@pytest.mark.parametrize("extra", [["--max_contributions=5", "--max_contributions_per_tick=2"],
                                   ["--max_contributions=3", "--contribution=tick_mean"]])
def test_job_releases_what_the_library_releases(tmp_path, seed_file, extra):
    X, ids, no_id = _data()
    _write(tmp_path / "in.jsonl", X, ids, no_id)
    out = tmp_path / "out"
    argv = _argv(tmp_path, seed_file, out, extra)
    result = job_mod.run(argv)
    assert "DONE" in str(result.state)
    got = sorted(_read(out / "releases.jsonl"), key=lambda r: r["tick"])
    job, _ = job_mod.parse_args(argv)
    want = _library(job, seed_file, X, ids, no_id)
    assert [r["tick"] for r in got] == list(range(1, T + 1))
    assert got == want
    assert got[-1]["privacy"]["unit"]["field"] == "user"
    dead = _read(out / "non_private" / "dead_letter.jsonl")
    assert sorted((d["slot"], d["reason"]) for d in dead) == sorted((s, "no_privacy_id") for s in no_id)


def _write_csv(path, X, ids, no_id):
    """user,lat,lon with the id column first; a record without an id has an empty id field."""
    lines = ["lat;user;lon"]
    for i in range(X.shape[0]):
        lines.append(f"{float(X[i, 0])!r};{'' if i in no_id else ids[i]};{float(X[i, 1])!r}")
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("extra", [["--max_contributions=5", "--max_contributions_per_tick=2"],
                                   ["--max_contributions=3", "--contribution=tick_mean"]])
def test_csv_job_releases_what_the_library_releases(tmp_path, seed_file, extra):
    """The id as a CSV column named in the header (here between the coordinates, with another delimiter):
    the point is every other column, the header keeps no slot, an empty id field is dead-lettered."""
    X, ids, no_id = _data(seed=5)
    ids = [str(v) for v in ids]  # a CSV field is text: 7 and "7" are one id
    _write_csv(tmp_path / "in.csv", X, ids, no_id)
    out = tmp_path / "out"
    argv = [a.replace("in.jsonl", "in.csv") for a in _argv(tmp_path, seed_file, out, extra)] + ["--delimiter=;"]
    assert "DONE" in str(job_mod.run(argv).state)
    got = sorted(_read(out / "releases.jsonl"), key=lambda r: r["tick"])
    job, _ = job_mod.parse_args(argv)
    assert job.csv_header and job.csv_id_column == 1 and job.csv_columns == (0, 2)
    assert got == _library(job, seed_file, X, ids, no_id)
    dead = _read(out / "non_private" / "dead_letter.jsonl")
    assert sorted((d["slot"], d["reason"]) for d in dead) == sorted((s, "no_privacy_id") for s in no_id)


def test_two_worker_processes_release_byte_identical_to_one(tmp_path, seed_file):
    X, ids, no_id = _data(900, seed=4)
    _write(tmp_path / "in.jsonl", X, ids, no_id)
    runs = []
    for name, multi in (("one", []), ("two", ["--runner=FnApiRunner", "--direct_running_mode=multi_processing",
                                               "--direct_num_workers=2"])):
        argv = _argv(tmp_path, seed_file, tmp_path / name, ["--max_contributions=4", *multi])
        assert "DONE" in str(job_mod.run(argv).state)
        runs.append((tmp_path / name / "releases.jsonl").read_bytes())
    assert runs[0] == runs[1] and runs[0].count(b"\n") == T


@pytest.mark.parametrize("seed", range(4))
def test_the_keyed_rule_is_the_tick_by_tick_rule(seed):
    rng = np.random.default_rng(seed)
    from dpstream.params import EngineConfig
    cfg = EngineConfig(n_clusters=2, dim=1, radius=1.0, epsilon=1.0, horizon_ticks=50, max_contributions=5,
                       max_contributions_per_tick=2)
    ticks = [rng.integers(0, 4, size=rng.integers(0, 7)) for _ in range(12)]
    b = ContributionBounder(cfg)
    lib = []
    for t, u in enumerate(ticks):
        x = np.c_[np.arange(len(u), dtype=float) + 100 * t]
        lib.append(b.bound(x, u.tolist())[:, 0])
    lib = np.concatenate(lib)
    slots = np.concatenate([np.arange(len(u)) + 100 * t for t, u in enumerate(ticks)])
    units = np.concatenate(ticks)
    keyed = np.sort(np.concatenate([slots[units == v][unit_keep(slots[units == v] // 100, 5, 2)]
                                    for v in np.unique(units)])) if units.size else np.zeros(0)
    np.testing.assert_array_equal(np.sort(lib), keyed)


@pytest.mark.parametrize("seed", range(6))
def test_the_many_unit_rules_decide_each_unit_as_alone(seed):
    """units_keep / units_tick_means over many units at once = unit_keep / unit_tick_means per unit."""
    from dpstream.contributions import unit_tick_means, units_keep, units_tick_means
    from dpstream.params import EngineConfig
    rng = np.random.default_rng(seed)
    cfg = EngineConfig(n_clusters=2, dim=2, radius=3.0, epsilon=1.0, horizon_ticks=50, max_contributions=3,
                       max_contributions_per_tick=2)
    n = int(rng.integers(1, 300))
    codes = np.sort(rng.integers(0, 12, n))
    ticks = np.concatenate([np.sort(rng.integers(0, 8, (codes == c).sum())) for c in np.unique(codes)])
    X = rng.normal(scale=3.0, size=(n, 2))
    keep = units_keep(codes, ticks, 3, 2)
    means, first = units_tick_means(X, codes, ticks, 3, cfg)
    want_keep, want_means, want_first = [], [], []
    for c in np.unique(codes):
        rows = np.flatnonzero(codes == c)
        want_keep.append(unit_keep(ticks[rows], 3, 2))
        m, f = unit_tick_means(X[rows], ticks[rows], 3, cfg)
        want_means.append(m)
        want_first.append(rows[f])
    np.testing.assert_array_equal(keep, np.concatenate(want_keep))
    np.testing.assert_array_equal(first, np.concatenate(want_first))
    assert np.array_equal(means, np.concatenate(want_means))  # bit for bit: the same sums in the same order


@pytest.mark.parametrize("extra, message", [
    (["--max_contributions=3"], "need --privacy_id_field"),
    (["--privacy_id_field=user"], "needs --max_contributions"),
    (["--privacy_id_field=user", "--max_contributions=3", "--format=numpy"], "numpy rows carry no id"),
    (["--privacy_id_field=user", "--max_contributions=3", "CSV"], "has no column 'user'"),
    (["--privacy_id_field=a", "--max_contributions=3", "CSV"], "2 column\\(s\\) besides 'a' for --dim 1"),
    (["--privacy_id_field=a", "--max_contributions=3", "--columns=a", "CSV"], "includes the privacy id column"),
    (["--privacy_id_field=a", "--max_contributions=3", "GLOB"], "pass --csv_header"),
])
def test_unit_option_errors(tmp_path, seed_file, extra, message):
    (tmp_path / "in.jsonl").write_text('{"x": [0, 0]}\n')
    (tmp_path / "in.csv").write_text('a,b,c\n0,0,0\n')
    # a glob that does not end in .csv: the header is not implied
    name = "in.csv" if "CSV" in extra else "in.cs[v]" if "GLOB" in extra else "in.jsonl"
    dim = "--dim=1" if "--privacy_id_field=a" in extra else "--dim=2"
    extra = [e for e in extra if e not in ("CSV", "GLOB")]
    argv = [f"--input={tmp_path}/{name}", f"--output={tmp_path}/o", dim, "--radius=1",
            "--horizon_ticks=2", f"--seed_file={seed_file}", *[e for e in extra]]
    with pytest.raises(job_mod.OptionError, match=message):
        job_mod.parse_args(argv)


def test_a_stream_takes_a_unit_and_the_builtin_stream_does_not(seed_file):
    sub = ["--input_subscription=projects/p/subscriptions/s", "--output=/tmp/unused", "--dim=2", "--radius=1",
           "--tick_seconds=10", "--horizon_ticks=2", f"--seed_file={seed_file}"]
    job, _ = job_mod.parse_args(sub + ["--privacy_id_field=user", "--max_contributions=3"])
    assert job.unit["privacy_unit"] == "user" and job_mod.engine_config(job).neighbouring == "add_remove"
    with pytest.raises(job_mod.OptionError, match="built-in stream's records carry no privacy id"):
        job_mod.parse_args(["--output=/tmp/unused", "--dim=2", "--radius=1", "--horizon_ticks=2",
                            f"--seed_file={seed_file}", "--privacy_id_field=user", "--max_contributions=3"])


def test_bound_contributions_stage_resets_at_each_run():
    """The keyed stage alone (no job): run = slot // (T·tick_size), bounds per (run, unit)."""
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to
    from dpstream.params import EngineConfig
    from transforms.parse import ParsedPoint
    from transforms.units import BoundContributions
    cfg = EngineConfig(n_clusters=2, dim=1, radius=1.0, epsilon=1.0, horizon_ticks=2, runs=None,
                       max_contributions=2)
    # tick_size 3, T = 2: run 0 holds slots 0–5, run 1 slots 6–11; unit "a" sends every slot
    elems = [("a", ParsedPoint(np.array([0.0]), s, None)) for s in range(12)]
    elems += [("b", ParsedPoint(np.array([0.0]), s, None)) for s in (4, 5, 11)]
    with TestPipeline() as p:
        out = (p | beam.Create(elems) | BoundContributions(cfg, tick_size=3)
               | beam.FlatMap(lambda q: q.slots.tolist()))
        assert_that(out, equal_to([0, 1, 6, 7, 4, 5, 11]))


def test_no_id_letters_keep_the_parser_counters_balanced(tmp_path, seed_file):
    X, ids, no_id = _data(300, seed=6)
    _write(tmp_path / "in.jsonl", X, ids, no_id)
    result = job_mod.run(_argv(tmp_path, seed_file, tmp_path / "out", ["--max_contributions=2"]))
    c = job_mod.operator_counts(result)
    assert c["dead_letter_no_privacy_id"] == c["dead_letter"] == len(no_id)
    assert c["valid"] == 300 - len(no_id) and c["read"] == c["valid"] + c["dead_letter"]
