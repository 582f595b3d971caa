"""The main job (pipelines.dp_stream_cluster): the same releases as the engine, a data-independent
release clock in batch and TestStream modes, dead letters that keep their slots, option errors."""
from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                          exc_type=ImportError)

from apache_beam.coders import PickleCoder  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions  # noqa: E402
from apache_beam.testing.test_stream import TestStream as _TestStream  # noqa: E402
from apache_beam.utils.timestamp import Timestamp  # noqa: E402

from dpstream.engine import Engine  # noqa: E402
from dpstream.release import RELEASE_FIELDS  # noqa: E402
from dpstream.release_log import resolve  # noqa: E402
from pipelines import dp_stream_cluster as job_mod  # noqa: E402
from transforms.cluster import load_seed  # noqa: E402
from transforms.parse import Record  # noqa: E402

T0 = 1_800_000_000.0  # event-time tests: a public start time, seconds


@pytest.fixture
def seed_file(tmp_path):
    p = tmp_path / "seed"
    p.write_text("d7f1e0c2a9b84c3e9f0a1b2c3d4e5f60718293a4b5c6d7e8f90f1e2d3c4b5a69\n")
    return str(p)


def _blobs(n, rng, d=2):
    means = np.array([[-5.0, -5.0], [5.0, 5.0], [5.0, -5.0]])[:, :d]
    return means[rng.integers(0, 3, n)] + rng.normal(scale=0.5, size=(n, d))


def _engine_releases(job, seed_path, ticks):
    """The library engine over the given per-tick arrays (ticks 1..T), as JSON dicts."""
    eng = Engine(job_mod.engine_config(job), load_seed(seed_path))
    out = []
    for t in range(1, job.horizon_ticks + 1):
        x = ticks.get(t, np.zeros((0, job.dim)))
        out.append(json.loads(json.dumps(eng.step(x).to_dict())))
    return out


def _run_batch(argv):
    result = job_mod.run(argv)
    assert "DONE" in str(result.state)
    return result


def _read_jsonl(path):
    """The dicts of a JSON-lines file; a release log's references to an earlier tick's coreset resolved."""
    with open(path) as fh:
        return [d for _, d in resolve([json.loads(line) for line in fh if line.strip()])]


# --------------------------------------------------------------------------- equivalence

@pytest.mark.parametrize("dtype, shards", [(np.float64, []), (np.float32, ["--point_shards=3"])])
def test_batch_job_releases_exactly_what_the_engine_releases(tmp_path, seed_file, dtype, shards):
    """float32 rows (inside the ball: not clipped) cross every shuffle as float32 (transforms.stages.compact_points)
    and are widened where the rings are computed: the releases are still the engine's on the same rows. Two
    point shards (the default on one local worker) or three (every fan-in waits for all three shards)."""
    rng = np.random.default_rng(1)
    X = _blobs(2300, rng).astype(dtype)
    np.save(tmp_path / "a.npy", X[:1000])
    np.save(tmp_path / "b.npy", X[1000:])  # two files: slots continue across them
    out = tmp_path / "out"
    argv = [f"--input={tmp_path}/*.npy", f"--output={out}", "--dim=2", "--radius=12", "--k=3",
            "--tick_size=200", "--horizon_ticks=14", f"--seed_file={seed_file}", "--epsilon=1", *shards]
    _run_batch(argv)
    assert job_mod.parse_args(argv)[0].point_shards == (3 if shards else 2)
    got = sorted(_read_jsonl(out / "releases.jsonl"), key=lambda r: r["tick"])
    job, _ = job_mod.parse_args(argv)
    want = _engine_releases(job, seed_file, {t + 1: X[t * 200:(t + 1) * 200] for t in range(12)})
    assert [r["tick"] for r in got] == list(range(1, 15))  # ticks 13, 14 are empty and still release
    assert got == want
    assert set(got[0]) == set(RELEASE_FIELDS)
    assert _read_jsonl(out / "non_private" / "dead_letter.jsonl") == []


@pytest.mark.parametrize("timer, semicoreset", [("batch", "tree"), ("looping", "tree"), ("batch", "snap")])
def test_float32_rows_clipped_in_assign_rings_release_what_the_engine_releases(tmp_path, seed_file, timer,
                                                                             semicoreset):
    """The points cross ShardTicks, RouteByEpoch and AssignRings as they were read (float32 here) and are
    clipped in AssignRings, not where the engine clips them (on arrival): most rows lie outside the ball,
    and the releases are still the engine's, bit for bit, in both timer modes; with snap the bicriteria
    (which clips in its own stage) and the rings see the same clipped points."""
    rng = np.random.default_rng(7)
    X = _blobs(1400, rng).astype(np.float32)
    assert (np.linalg.norm(X.astype(np.float64), axis=1) > 6).mean() > 0.5
    np.save(tmp_path / "a.npy", X)
    out = tmp_path / "out"
    argv = [f"--input={tmp_path}/a.npy", f"--output={out}", "--dim=2", "--radius=6", "--k=3",
            "--tick_size=200", "--horizon_ticks=8", f"--seed_file={seed_file}", "--epsilon=1",
            f"--tick_timer={timer}", f"--semicoreset={semicoreset}"]
    result = _run_batch(argv)
    got = sorted(_read_jsonl(out / "releases.jsonl"), key=lambda r: r["tick"])
    job, _ = job_mod.parse_args(argv)
    want = _engine_releases(job, seed_file, {t + 1: X[t * 200:(t + 1) * 200] for t in range(7)})
    assert [r["tick"] for r in got] == list(range(1, 9))
    assert got == want
    from pipelines.summary import operator_counts
    assert operator_counts(result)["clipped"] == int((np.linalg.norm(X.astype(np.float64), axis=1) > 6).sum())


@pytest.mark.parametrize("semicoreset", ["lloyd", "snap"])
def test_batch_job_with_the_other_semicoresets_releases_what_the_engine_releases(tmp_path, seed_file, semicoreset):
    """lloyd's blocks ship raw points between AssignRings and RingMergeReduce, snap's counts only (and it
    turns the bicriteria on): the same releases as the engine."""
    rng = np.random.default_rng(5)
    X = _blobs(1200, rng)
    np.save(tmp_path / "a.npy", X)
    out = tmp_path / "out"
    argv = [f"--input={tmp_path}/a.npy", f"--output={out}", "--dim=2", "--radius=12", "--k=3",
            "--tick_size=200", "--horizon_ticks=7", f"--seed_file={seed_file}", "--epsilon=1",
            f"--semicoreset={semicoreset}"]
    _run_batch(argv)
    got = sorted(_read_jsonl(out / "releases.jsonl"), key=lambda r: r["tick"])
    job, _ = job_mod.parse_args(argv)
    want = _engine_releases(job, seed_file, {t + 1: X[t * 200:(t + 1) * 200] for t in range(6)})
    assert [r["tick"] for r in got] == list(range(1, 8))
    assert got == want


@pytest.mark.parametrize("bucket_shards, timer, held_bytes", [(3, "batch", None), (3, "batch", 1),
                                                              (3, "looping", None), (1, "looping", None)])
def test_snap_job_with_bucket_shards_releases_what_the_engine_releases(tmp_path, seed_file, monkeypatch,
                                                                       bucket_shards, timer, held_bytes):
    """--semicoreset snap runs BicriteriaCenters on Q·(L+1)·S (tree, level, bucket shard) keys and the
    CenterRegistry merges their reports: the releases are the engine's with the same bucket_shards, whether
    the level updates are summed per bundle (batch timer; emitted early past a byte budget: 1 byte = after
    every batch) or sent one per point shard (looping timer, here over four point shards)."""
    if held_bytes is not None:
        from transforms.bicriteria import _LevelUpdatesFn
        monkeypatch.setattr(_LevelUpdatesFn, "MAX_HELD_BYTES", held_bytes)
    rng = np.random.default_rng(5)
    X = _blobs(1500, rng)
    np.save(tmp_path / "a.npy", X)
    out = tmp_path / "out"
    argv = [f"--input={tmp_path}/a.npy", f"--output={out}", "--dim=2", "--radius=12", "--k=3", "--tick_size=150",
            "--horizon_ticks=11", f"--seed_file={seed_file}", "--epsilon=2", "--semicoreset=snap",
            f"--bucket_shards={bucket_shards}", f"--tick_timer={timer}", f"--point_shards={4 if timer == 'looping' else 1}"]
    _run_batch(argv)
    got = sorted(_read_jsonl(out / "releases.jsonl"), key=lambda r: r["tick"])
    job, _ = job_mod.parse_args(argv)
    assert job_mod.engine_config(job).bucket_shards == bucket_shards
    want = _engine_releases(job, seed_file, {t + 1: X[t * 150:(t + 1) * 150] for t in range(10)})
    assert [r["tick"] for r in got] == list(range(1, 12))
    assert got == want
    assert len(got[-1]["centers"]) == 3 and got[-1]["n_candidate_centers"] > 1  # the bicriteria found centers


def test_runs_job_releases_what_the_library_run_sequence_releases(tmp_path, seed_file):
    """--runs 3 --window_runs 1: run, tick, global tick and window centers as dpstream.runs gives them."""
    from dpstream.runs import RunSequence
    rng = np.random.default_rng(11)
    X = _blobs(1800, rng)
    np.save(tmp_path / "a.npy", X)
    out = tmp_path / "out"
    argv = [f"--input={tmp_path}/a.npy", f"--output={out}", "--dim=2", "--radius=12", "--k=3", "--tick_size=300",
            "--horizon_ticks=2", "--runs=3", "--window_runs=1", f"--seed_file={seed_file}", "--epsilon=1"]
    _run_batch(argv)
    got = sorted(_read_jsonl(out / "releases.jsonl"), key=lambda r: r["global_tick"])
    job, _ = job_mod.parse_args(argv)
    seq = RunSequence(job_mod.engine_config(job), load_seed(seed_file))
    want = [json.loads(json.dumps(seq.step(X[t * 300:(t + 1) * 300]).to_dict())) for t in range(6)]
    assert [(r["run"], r["tick"], r["global_tick"]) for r in got] == [(r // 2, r % 2 + 1, r + 1) for r in range(6)]
    assert [r["window_first_run"] for r in got] == [0, 0, 0, 0, 1, 1]
    assert got == want
    assert got[2]["window_centers"] != got[2]["centers"]  # run 1's window also holds run 0's coreset


def test_runs_options_are_checked(tmp_path):
    base = ["--builtin_n=1000", "--tick_size=500", f"--output={tmp_path}/out"]
    for bad, words in ((["--runs=0"], "--runs must be"), (["--window_runs=-1"], "--window_runs must be"),
                       (["--runs=2", "--semicoreset=snap"], "bicriteria"),
                       (["--runs=unbounded"], "needs a Pub/Sub input"), (["--runs=many"], "--runs must be")):
        with pytest.raises(job_mod.OptionError, match=words):
            job_mod.parse_args(base + bad)
    job, _ = job_mod.parse_args(base + ["--runs=4"])
    assert (job.runs, job.total_ticks, job_mod.tick_clock(job).horizon_ticks) == (4, 8, 8)
    from pipelines.summary import run_warnings
    beyond = [w for w in run_warnings(job, dict(read=1000, valid=1000, ticked=600, outside_horizon=400))
              if "beyond the horizon" in w]
    assert beyond and "--horizon_ticks 2 × --runs 4 × --tick_size 500 = 4,000 slots" in beyond[0], beyond
    job, _ = job_mod.parse_args(["--input_subscription=projects/dpstream-test/subscriptions/s", "--dim=2",
                                 "--radius=1", "--horizon_ticks=3", "--runs=unbounded",
                                 "--output_topic=projects/dpstream-test/topics/out", f"--dead_letter={tmp_path}/dl.jsonl"])
    clock = job_mod.tick_clock(job)
    assert job.runs is None and job.total_ticks is None and clock.horizon_ticks is None
    assert clock.in_horizon(np.array([0, 1, 4, 10 ** 9])).tolist() == [False, True, True, True]
    assert job_mod.engine_config(job).runs is None


def test_dead_letters_keep_their_slots_and_every_good_point_is_processed(tmp_path, seed_file):
    rng = np.random.default_rng(2)
    X = _blobs(600, rng)
    bad = {  # line index -> (raw line, reason)
        3: ("{not json", "malformed_json"), 50: ('{"x": [1.0]}', "wrong_dimension"),
        77: ('{"x": [NaN, 1]}', "nan_or_inf"), 78: ("1e999,2", "nan_or_inf"),
        120: ('{"x": ["a", 2]}', "non_numeric"), 121: ("", "empty"), 199: ('{"y": [1, 2]}', "missing_x"),
        200: ("[1, 2]", "not_object"), 333: ('{"x": 5}', "wrong_type"), 401: ("1,2,3", "wrong_dimension"),
        402: (b"\xff\xfe".decode("latin-1"), "wrong_dimension"),
    }
    lines, good_slots = [], []
    for i in range(X.shape[0]):
        if i in bad:
            lines.append(bad[i][0])
        else:
            lines.append(json.dumps({"x": X[i].tolist()}) if i % 2 else f"{float(X[i, 0])!r},{float(X[i, 1])!r}")
            good_slots.append(i)
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    argv = [f"--input={tmp_path}/in.jsonl", f"--output={out}", "--dim=2", "--radius=12", "--k=3",
            "--tick_size=100", "--horizon_ticks=6", f"--seed_file={seed_file}",
            "--format=auto"]  # JSON and CSV lines mixed: sniff each line
    result = _run_batch(argv)
    dead = _read_jsonl(out / "non_private" / "dead_letter.jsonl")
    assert sorted((d["slot"], d["reason"]) for d in dead) == sorted((s, r) for s, (_, r) in bad.items())
    from apache_beam.metrics.metric import MetricsFilter
    counters = {c.key.metric.name: c.committed for c in
                result.metrics().query(MetricsFilter().with_namespace("dpstream"))["counters"]}
    assert counters["points_processed"] == len(good_slots) == X.shape[0] - len(bad)
    assert counters["read"] == counters["valid"] + counters["dead_letter"] == X.shape[0]
    # the engine fed only the good points, each in the tick of its own slot: the same releases
    good = np.array(good_slots)
    ticks = {t: X[good[(good // 100) + 1 == t]] for t in range(1, 7)}
    job, _ = job_mod.parse_args(argv)
    assert sorted(_read_jsonl(out / "releases.jsonl"), key=lambda r: r["tick"]) == \
        _engine_releases(job, seed_file, ticks)


def test_engine_state_never_holds_the_seed(seed_file):
    from dpstream.params import EngineConfig
    seed = load_seed(seed_file)
    eng = Engine(EngineConfig(n_clusters=2, dim=2, radius=5, epsilon=1, horizon_ticks=4), seed)
    eng.step(np.ones((10, 2)))
    blob = pickle.dumps(eng)
    assert seed not in blob and seed.hex().encode() not in blob
    back = pickle.loads(blob)
    with pytest.raises(RuntimeError, match="attach_seed"):
        back.step(np.ones((3, 2)))
    with pytest.raises(ValueError, match="not the seed"):
        pickle.loads(blob).attach_seed(b"another-secret-seed-of-32-bytes!")
    back = pickle.loads(blob)
    back.attach_seed(seed)
    assert json.dumps(back.step(np.ones((3, 2))).to_dict()) == json.dumps(eng.step(np.ones((3, 2))).to_dict())


# --------------------------------------------------------------------------- ticks: TestStream vs batch

def _event_records(rng, n_ticks, tick_seconds, skip):
    """Records with JSON ts, none in the ticks of ``skip``."""
    recs = []
    for t in range(1, n_ticks + 1):
        if t in skip:
            continue
        X = _blobs(int(rng.integers(20, 120)), rng)
        ts = T0 + (t - 1) * tick_seconds + np.sort(rng.uniform(0, tick_seconds * 0.999, X.shape[0]))
        recs += [(json.dumps({"x": x.tolist(), "ts": float(s)}), float(s)) for x, s in zip(X, ts)]
    return recs


def _event_argv(out, seed_file, extra=()):
    return [f"--output={out}", "--dim=2", "--radius=12", "--k=3", "--tick_seconds=10",
            f"--t_start={int(T0)}", "--horizon_ticks=8", f"--seed_file={seed_file}", *extra]


class _Stamp(beam.DoFn):
    def process(self, rel, ts=beam.DoFn.TimestampParam):
        yield json.dumps({"tick": rel["tick"], "ts": ts.micros})


def _run_teststream(records, out, seed_file, lateness="0"):
    argv = _event_argv(out, seed_file, ["--input_subscription=projects/p/subscriptions/unused",
                                        f"--allowed_lateness_seconds={lateness}", "--point_shards=3"])
    job, _ = job_mod.parse_args(argv)
    os.makedirs(out, exist_ok=True)
    ts_stream = _TestStream(coder=PickleCoder())
    by_tick = {}
    for raw, s in records:
        by_tick.setdefault(int((s - T0) // 10), []).append((raw, s))
    for k in sorted(by_tick):
        ts_stream = ts_stream.add_elements(
            [beam.window.TimestampedValue(Record(raw, None, s), Timestamp.of(s)) for raw, s in by_tick[k]])
        ts_stream = ts_stream.advance_processing_time(2).advance_watermark_to(Timestamp.of(T0 + (k + 1) * 10))
    ts_stream = ts_stream.advance_processing_time(2).advance_watermark_to_infinity()
    opts = PipelineOptions(["--runner=BundleBasedDirectRunner"])
    opts.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(options=opts)
    src = p | "Events" >> ts_stream
    pcs = job_mod.build(p, job, seed_file, source=src)
    stamps = str(out) + "/stamps.jsonl"
    (pcs["releases"] | "Stamp" >> beam.ParDo(_Stamp())
     | "WriteStamps" >> beam.ParDo(__import__("pipelines.sinks", fromlist=["_AppendLinesFn"])._AppendLinesFn(stamps)))
    p.run().wait_until_finish()
    rels = sorted(_read_jsonl(os.path.join(out, "releases.jsonl")), key=lambda r: r["tick"])
    return rels, sorted((d["tick"], d["ts"]) for d in _read_jsonl(stamps))


def test_teststream_releases_every_tick_and_equals_the_batch_run(tmp_path, seed_file):
    rng = np.random.default_rng(3)
    recs = _event_records(rng, 6, 10.0, skip={2, 5})  # ticks 2, 5, 7, 8 carry no record
    rels, stamps = _run_teststream(recs, tmp_path / "stream", seed_file)
    assert [r["tick"] for r in rels] == list(range(1, 9))
    # the same records from a file, batch mode on the DirectRunner, same clock: the same releases
    (tmp_path / "in.jsonl").write_text("\n".join(raw for raw, _ in recs) + "\n")
    _run_batch(_event_argv(tmp_path / "batch", seed_file, [f"--input={tmp_path}/in.jsonl"]))
    batch = sorted(_read_jsonl(tmp_path / "batch" / "releases.jsonl"), key=lambda r: r["tick"])
    assert rels == batch
    # and what the engine releases for the same ticks (event time: add/remove neighbours)
    job, _ = job_mod.parse_args(_event_argv(tmp_path / "x", seed_file, [f"--input={tmp_path}/in.jsonl"]))
    ticks = {}
    for raw, s in recs:
        ticks.setdefault(int((s - T0) // 10) + 1, []).append(json.loads(raw)["x"])
    assert batch == _engine_releases(job, seed_file, {t: np.array(v) for t, v in ticks.items()})
    # one release per tick at the tick's public close time, whatever the data
    assert stamps == [(t, int((T0 + t * 10 + 2) * 1e6) - 1000) for t in range(1, 9)]  # + lateness 0 + 2 panes


def test_release_count_and_timestamps_do_not_depend_on_the_data(tmp_path, seed_file):
    rng = np.random.default_rng(4)
    _, stamps_a = _run_teststream(_event_records(rng, 8, 10.0, skip=set()), tmp_path / "a", seed_file)
    _, stamps_b = _run_teststream(_event_records(rng, 3, 10.0, skip={1}), tmp_path / "b", seed_file)
    _, stamps_c = _run_teststream([], tmp_path / "c", seed_file)  # not a single record: still 8 releases
    assert stamps_a == stamps_b == stamps_c
    assert len(stamps_a) == 8


# --------------------------------------------------------------------------- options

@pytest.mark.parametrize("argv, message", [
    (["--output=o", "--runner=NoSuchRunner"], "unknown runner"),
    (["--output=o", "--epsilon=0"], "epsilon"),
    (["--output=o", "--epsilon=-1"], "epsilon"),
    (["--output=o", "--input=x.npy", "--dim=2", "--horizon_ticks=3"], "missing --radius"),
    (["--output=o", "--input=x.npy", "--input_subscription=projects/p/subscriptions/s", "--dim=2",
      "--radius=1"], "at most one of"),
    ([], "give --output"),
    (["--output=o", "--output_topic=projects/p/topics/t"], "not both"),
    (["--output=o", "--direct_num_workers=2"], "needs --runner=FnApiRunner --direct_running_mode=multi_processing"),
    (["--output=o", "--runner=DataflowRunner"], "--seed_file is required"),
    (["--output=o", "--tick_size=5", "--tick_seconds=1"], "one of --tick_size"),
    (["--output=o", "--epsilonn=1"], "unknown option"),
    (["--output=o", "--input=/nonexistent/*.npy", "--dim=2", "--radius=1", "--horizon_ticks=2"], "matches no file"),
    (["--output=o", "--input=/tmp/x.npy", "--dim=2", "--radius=1"], "missing --horizon_ticks"),
    (["--output=o", "--input_subscription=projects/p/subscriptions/s", "--dim=2", "--radius=1", "--horizon_ticks=2",
      "--max_clock_skew_seconds=-1"], "--max_clock_skew_seconds must be finite and >= 0"),
])
def test_option_errors_exit_with_one_line_saying_what_to_fix(argv, message, capsys):
    assert job_mod.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_seed_is_never_an_option_value_and_a_short_seed_file_is_refused(tmp_path, capsys):
    assert job_mod.main(["--output", str(tmp_path), "--seed", "123"]) == 2  # no such option
    short = tmp_path / "short"
    short.write_text("abc")
    assert job_mod.main(["--output", str(tmp_path / "o"), "--builtin_n=10", f"--seed_file={short}"]) == 2
    assert "head -c 32 /dev/urandom" in capsys.readouterr().err


# --------------------------------------------------------------------------- the invariants in the pipeline

def _records_by_tick(recs):
    by = {}
    for raw, s in recs:
        by.setdefault(int((s - T0) // 10) + 1, []).append(json.loads(raw)["x"])
    return {t: np.array(v) for t, v in by.items()}


def _stream_releases(job, seed_file, stream, out):
    """Run the streaming job over a TestStream on the BundleBasedDirectRunner; its releases by tick."""
    opts = PipelineOptions(["--runner=BundleBasedDirectRunner"])
    opts.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(options=opts)
    job_mod.build(p, job, seed_file, source=p | "Events" >> stream)
    p.run().wait_until_finish()
    return sorted(_read_jsonl(out / "releases.jsonl"), key=lambda r: r["tick"])


def test_records_outside_the_public_horizon_add_no_release_and_change_nothing(tmp_path, seed_file):
    """P3: a record with a far-future (or past) timestamp neither adds releases nor enters a tick."""
    rng = np.random.default_rng(5)
    recs = _event_records(rng, 4, 10.0, skip=set())
    outside = [(json.dumps({"x": [1.0, 1.0], "ts": T0 + 500.0}), T0 + 500.0),
               (json.dumps({"x": [2.0, 2.0], "ts": T0 - 30.0}), T0 - 30.0)]
    a, stamps_a = _run_teststream(recs, tmp_path / "a", seed_file)
    b, stamps_b = _run_teststream(recs + outside, tmp_path / "b", seed_file)
    assert a == b and stamps_a == stamps_b and [r["tick"] for r in a] == list(range(1, 9))


def test_a_record_arriving_after_its_tick_closed_is_dropped_never_merged_into_a_later_tick(tmp_path, seed_file):
    """P4, P5: tick 1 is frozen when it closes; its straggler does not move into tick 2."""
    rng = np.random.default_rng(6)
    recs = _event_records(rng, 3, 10.0, skip=set())
    job, _ = job_mod.parse_args(_event_argv(tmp_path / "s", seed_file, [
        "--input_subscription=projects/p/subscriptions/unused", "--allowed_lateness_seconds=0"]))
    os.makedirs(tmp_path / "s", exist_ok=True)
    straggler = Record(json.dumps({"x": [9.0, 9.0], "ts": T0 + 1.0}), None, T0 + 1.0)
    stream = _TestStream(coder=PickleCoder())
    by = {}
    for raw, s in recs:
        by.setdefault(int((s - T0) // 10), []).append(beam.window.TimestampedValue(Record(raw, None, s),
                                                                                   Timestamp.of(s)))
    for k in sorted(by):
        stream = stream.add_elements(by[k]).advance_processing_time(2)
        stream = stream.advance_watermark_to(Timestamp.of(T0 + (k + 1) * 10 + 2.5))  # tick k+1 closes
        if k == 1:  # tick 1 closed long ago: now its straggler arrives
            stream = stream.add_elements([beam.window.TimestampedValue(straggler, Timestamp.of(T0 + 1.0))])
    stream = stream.advance_processing_time(2).advance_watermark_to_infinity()
    assert _stream_releases(job, seed_file, stream, tmp_path / "s") == \
        _engine_releases(job, seed_file, _records_by_tick(recs))


def test_pubsub_redeliveries_are_counted_once(tmp_path, seed_file):
    """P4: a redelivered message (same message id) contributes once. The runner's clock starts
    when the messages were published (``runner_clock``): the dedup judges a message's age by it."""
    from tests.beam.runner_clock import runner_clock
    rng = np.random.default_rng(7)
    recs = _event_records(rng, 3, 10.0, skip=set())
    job, _ = job_mod.parse_args(_event_argv(tmp_path / "s", seed_file, [
        "--input_subscription=projects/p/subscriptions/unused", "--allowed_lateness_seconds=0"]))
    os.makedirs(tmp_path / "s", exist_ok=True)
    msgs = [Record(raw, None, s, f"m{i}") for i, (raw, s) in enumerate(recs)]
    redelivered = msgs[::7]
    stream = _TestStream(coder=PickleCoder())
    stream = stream.add_elements([beam.window.TimestampedValue(r, Timestamp.of(r.ts)) for r in msgs])
    stream = stream.add_elements([beam.window.TimestampedValue(r, Timestamp.of(r.ts)) for r in redelivered])
    stream = stream.advance_processing_time(2).advance_watermark_to_infinity()
    with runner_clock(T0):
        got = _stream_releases(job, seed_file, stream, tmp_path / "s")
    assert got == _engine_releases(job, seed_file, _records_by_tick(recs))


def test_the_seed_is_in_no_job_graph_and_no_log_line(tmp_path, seed_file, caplog):
    """P16: workers read the seed from the file; the pickled DoFn and the launcher's logs hold none of it."""
    import logging
    from transforms.cluster import ClusterTicks
    seed = load_seed(seed_file)
    job, _ = job_mod.parse_args(["--output", str(tmp_path / "o"), "--builtin_n=3000", f"--seed_file={seed_file}"])
    ct = ClusterTicks(job_mod.engine_config(job), job_mod.tick_clock(job), seed_file)
    blob = pickle.dumps(ct)
    assert seed not in blob
    with caplog.at_level(logging.DEBUG):
        job_mod.run(["--output", str(tmp_path / "o"), "--builtin_n=3000", f"--seed_file={seed_file}"])
    assert seed.decode() not in caplog.text
    rels = _read_jsonl(tmp_path / "o" / "releases.jsonl")
    assert all(seed.decode() not in json.dumps(r) for r in rels)


def test_a_seed_used_on_other_data_is_refused(tmp_path, seed_file, capsys):
    """P16: the same seed on different data would release the difference exactly."""
    rng = np.random.default_rng(8)
    np.save(tmp_path / "d.npy", _blobs(500, rng))
    argv = [f"--input={tmp_path}/d.npy", f"--output={tmp_path}/o", "--dim=2", "--radius=12", "--k=3",
            "--tick_size=100", "--horizon_ticks=5", f"--seed_file={seed_file}"]
    assert job_mod.main(argv) == 0
    assert job_mod.main(argv) == 0  # the same run again: same releases, nothing new
    assert job_mod.main(argv[:-3] + ["--epsilon=2"] + argv[-3:]) == 2  # another configuration
    assert "already used" in capsys.readouterr().err
    np.save(tmp_path / "d.npy", _blobs(501, rng))  # a backfill: the same path, other data
    assert job_mod.main(argv) == 2
    assert "already used" in capsys.readouterr().err
    # and a stream never reuses a seed, not even on "the same" subscription
    stream = ["--input_subscription=projects/p/subscriptions/s", f"--output={tmp_path}/s", "--dim=2",
              "--radius=12", "--tick_seconds=1", "--t_start=0", "--horizon_ticks=3"]
    other = tmp_path / "seed2"
    other.write_text("0123456789abcdef0123456789abcdef-other\n")
    from pipelines.seed_registry import SeedReused, check_and_record, run_identity
    job, _ = job_mod.parse_args(stream + [f"--seed_file={other}"])
    ident = run_identity(job, job_mod.engine_config(job))
    check_and_record("fp-stream", ident, True)
    with pytest.raises(SeedReused):
        check_and_record("fp-stream", ident, True)


def test_cluster_ticks_with_the_whole_engine_in_one_key_equals_the_engine(tmp_path, seed_file):
    """ClusterTicks(bicriteria="internal"): the engine's own bicriteria under the engine key."""
    from transforms.cluster import ClusterTicks
    rng = np.random.default_rng(9)
    X = _blobs(900, rng)
    job, _ = job_mod.parse_args([f"--output={tmp_path}", "--builtin_n=900", "--tick_size=100", "--k=3",
                                 f"--seed_file={seed_file}", "--horizon_ticks=11"])
    cfg, clock = job_mod.engine_config(job), job_mod.tick_clock(job)
    ticks = [((0, t + 1), X[t * 100:(t + 1) * 100]) for t in range(9) if t != 4]  # tick 5 has no batch
    out = str(tmp_path / "rel.jsonl")
    with beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner"])) as p:
        (p | beam.Create(ticks) | ClusterTicks(cfg, clock, seed_file)
         | beam.Map(json.dumps) | beam.io.WriteToText(out, shard_name_template="", num_shards=1))
    got = sorted(_read_jsonl(out), key=lambda r: r["tick"])
    want = _engine_releases(job, seed_file, {t: X[(t - 1) * 100:t * 100] for t in range(1, 10) if t != 5})
    assert got == want and len(got) == 11


def _job_and_engine_on(X, tmp_path, seed_file, *, radius, k, tick_size, horizon, epsilon, extra=()):
    """The job's releases (in tick order) and the engine's on the rows X, ``tick_size`` rows a tick, and
    the job the command parsed (``extra``: more job options)."""
    np.save(tmp_path / "a.npy", X)
    out = tmp_path / "out"
    argv = [f"--input={tmp_path}/a.npy", f"--output={out}", f"--dim={X.shape[1]}", f"--radius={radius}",
            f"--k={k}", f"--tick_size={tick_size}", f"--horizon_ticks={horizon}", f"--seed_file={seed_file}",
            f"--epsilon={epsilon}", *extra]
    _run_batch(argv)
    got = sorted(_read_jsonl(out / "releases.jsonl"), key=lambda r: r["tick"])
    job, _ = job_mod.parse_args(argv)
    ticks = -(-len(X) // tick_size)
    want = _engine_releases(job, seed_file, {t + 1: X[t * tick_size:(t + 1) * tick_size] for t in range(ticks)})
    return got, want, job


def _engine_overrides(monkeypatch, overrides):
    """The job's engine configuration with the engine parameters ``overrides`` (no job option sets them)."""
    import pipelines.job.arguments as arguments  # where the job's configuration is made (the Job holds it)
    orig = arguments.make_config
    monkeypatch.setattr(arguments, "make_config", lambda **kw: orig(**kw).with_(**overrides))


def _engine_run(cfg, seed_file, ticks):
    """The engine's releases on ``ticks`` as the job writes them (JSON)."""
    engine = Engine(cfg, load_seed(seed_file))
    return [json.loads(json.dumps(engine.step(x).to_dict())) for x in ticks]


def _job_and_engine_with(overrides, rng_seed, tmp_path, seed_file, monkeypatch):
    """The job's releases and the engine's on 18 ticks of blobs (horizon 40), both with the engine
    parameters ``overrides`` (no job option sets them), and the configuration the job ran."""
    _engine_overrides(monkeypatch, overrides)
    X = _blobs(1800, np.random.default_rng(rng_seed))
    got, want, job = _job_and_engine_on(X, tmp_path, seed_file, radius=12, k=3, tick_size=100, horizon=40,
                                        epsilon=1)
    return got, want, job_mod.engine_config(job)


def test_batch_job_with_the_dyadic_flush_ticks_releases_what_the_engine_releases(tmp_path, seed_file, monkeypatch):
    """flush_schedule="dyadic" (ticks 4 and 16 flush without an epoch change on this stream): the
    epoch planner's flush flags drive the job's rings exactly as the engine's own."""
    got, want, cfg = _job_and_engine_with(dict(flush_schedule="dyadic", first_epoch_blocks=50.0), 3,
                                          tmp_path, seed_file, monkeypatch)
    assert cfg.flush_schedule == "dyadic"
    assert got == want and len(got) == 40
    assert got[15]["epoch"] == 0  # ticks 4 and 16 flushed without an epoch change


def test_batch_job_with_the_count_flushes_and_block_root_tail_releases_what_the_engine_releases(tmp_path, seed_file,
                                                                                                 monkeypatch):
    """flush_schedule="count" (flushes when the DP count has grown, without an epoch change) and
    root_tail="block" (A's root threshold by block index): the epoch planner's flush flags and the
    job's A calls follow the engine's exactly."""
    got, want, cfg = _job_and_engine_with(dict(flush_schedule="count", flush_growth=0.5, flush_min_blocks=0.0,
                                               root_tail="block", first_epoch_blocks=50.0), 4,
                                          tmp_path, seed_file, monkeypatch)
    assert cfg.flush_schedule == "count" and cfg.root_tail == "block"
    assert got == want and len(got) == 40
    assert got[17]["epoch"] == 0
    # the count flushes happened: the releases' coreset changed at ticks other than the first
    changed = [r["tick"] for a, r in zip(got, got[1:]) if r["coreset_weights"] != a["coreset_weights"]]
    assert len(changed) >= 2


def test_batch_job_whose_first_flush_waits_for_the_dp_count_releases_what_the_engine_releases(tmp_path, seed_file,
                                                                                                monkeypatch):
    """first_flush_leaves=3 (the first flush at the first DP count of three of A's keep thresholds, past
    tick 1's 100 points here): the epoch planner's first flush is the engine's, tick for tick."""
    got, want, cfg = _job_and_engine_with(dict(first_flush_leaves=3.0, first_epoch_blocks=50.0), 5,
                                          tmp_path, seed_file, monkeypatch)
    assert cfg.first_flush_leaves == 3.0
    assert got == want and len(got) == 40
    first = next(r["tick"] for r in got if r["coreset_weights"])
    assert got[0]["coreset_weights"] == [] and 1 < first and got[first - 1]["epoch"] == 0


def test_batch_job_with_tree_cells_releases_what_the_engine_releases(tmp_path, seed_file, monkeypatch):
    """tree_cells (A's cells: raw points shipped to RingMergeReduce, the tree and the cells run there): the
    job's releases are the engine's."""
    got, want, cfg = _job_and_engine_with(dict(tree_cells=0.5), 6, tmp_path, seed_file, monkeypatch)
    assert cfg.tree_cells == 0.5
    assert got == want and len(got) == 40
    assert any(len(r["coreset_weights"]) for r in got)


def test_batch_job_with_the_cells_options_releases_what_the_engine_releases(tmp_path, seed_file, monkeypatch):
    """tree_cells located in a projection (the keyed draws made by the shards' and the rings' A alike) with
    Lloyd steps: the job's releases are the engine's."""
    got, want, cfg = _job_and_engine_with(dict(tree_cells=0.4, cells_locate_dims=1, cells_lloyd_steps=2,
                                               cells_lloyd_share=0.3), 6, tmp_path, seed_file, monkeypatch)
    assert (cfg.cells_locate_dims, cfg.cells_lloyd_steps, cfg.cells_lloyd_share) == (1, 2, 0.3)
    assert got == want and len(got) == 40
    assert any(len(r["coreset_weights"]) for r in got)


def test_batch_job_with_the_cells_seeding_releases_what_the_engine_releases(tmp_path, seed_file, monkeypatch):
    """The cells over-seeded and re-seeded between Lloyd steps, with their own count share (post-processing
    and keyed draws, the same in every shard's A): the job's releases are the engine's."""
    got, want, cfg = _job_and_engine_with(dict(tree_cells=0.4, cells_locate_dims=1, cells_lloyd_steps=3,
                                               cells_lloyd_share=0.3, cells_overseed=3, cells_reseed=0.25,
                                               cells_count_share=0.1), 6, tmp_path, seed_file, monkeypatch)
    assert (cfg.cells_overseed, cfg.cells_reseed, cfg.cells_count_share) == (3, 0.25, 0.1)
    assert got == want and len(got) == 40
    assert any(len(r["coreset_weights"]) for r in got)


@pytest.mark.parametrize("gate_max", [0.0, 1.7])
def test_batch_job_with_the_cells_gate_releases_what_the_engine_releases(tmp_path, seed_file, monkeypatch, gate_max):
    """cells_gate (A's mode per block from the DP count since the ring's last release: the epoch planner's
    counts reach the job's rings with each tick's plan), with and without its upper bound cells_gate_max: the
    job's releases are the engine's, with both modes run on this stream and, with the bound, blocks over it
    sent to the plain tree."""
    import dpstream.semicoresets as sc_mod

    modes = []
    orig = sc_mod.TreeSemicoreset.run_gated

    def run_gated(self, block, key, n_hat):
        out = orig(self, block, key, n_hat)
        unit = block.n_parts * self.cfg.n_clusters * self.gated_tree().leaf_threshold()
        over = bool(self.cfg.cells_gate_max) and n_hat >= self.cfg.cells_gate_max * unit
        modes.append("over" if over else self.last_mode)
        assert not over or self.last_mode == "tree"
        return out

    monkeypatch.setattr(sc_mod.TreeSemicoreset, "run_gated", run_gated)
    got, want, cfg = _job_and_engine_with(dict(tree_cells=0.4, cells_gate=0.5, cells_gate_max=gate_max), 6,
                                          tmp_path, seed_file, monkeypatch)
    assert (cfg.cells_gate, cfg.cells_gate_max) == (0.5, gate_max)
    assert got == want and len(got) == 40
    assert set(modes) == ({"cells", "tree", "over"} if gate_max else {"cells", "tree"})


def test_batch_job_with_ring_tolerance_releases_what_the_engine_releases(tmp_path, seed_file):
    """The default ring_tolerance (unit-norm points: every one on the first epoch's ring boundary): the
    job's AssignRings puts each point in the ring the engine does, so the releases are the engine's."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(1200, 3)) + np.array([3.0, 0.0, 0.0]) * rng.integers(0, 2, (1200, 1))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    got, want, job = _job_and_engine_on(X, tmp_path, seed_file, radius=1, k=2, tick_size=200, horizon=7, epsilon=1)
    assert job_mod.engine_config(job).ring_tolerance == 1e-6
    assert [r["tick"] for r in got] == list(range(1, 8))
    assert got == want


def test_batch_job_with_the_cluster_decay_rule_releases_what_the_engine_releases(tmp_path, seed_file, monkeypatch):
    """release_decay_rule="clusters" (the release fit's age decay only where newer epochs still fill a
    cluster, under its own key): on a stream whose two first clusters stop arriving at tick 9, the rule keeps
    them (the engine's releases differ from the age rule's), and the job's ReleaseCoreset and EpochClose
    stages, calling the same step, release exactly the engine's."""
    _engine_overrides(monkeypatch, dict(release_decay_rule="clusters"))
    rng = np.random.default_rng(5)
    T, per = 30, 200
    ticks = []
    for t in range(T):
        c = [(-6.0, -6.0), (6.0, -6.0)] if t < 8 else [(0.0, 7.0)]
        ticks.append(np.vstack([rng.normal(size=(per // len(c), 2)) * 0.7 + np.array(m) for m in c]))
    got, want, job = _job_and_engine_on(np.vstack(ticks), tmp_path, seed_file, radius=12, k=3, tick_size=per,
                                        horizon=T, epsilon=2)
    cfg = job_mod.engine_config(job)
    assert cfg.release_decay_rule == "clusters"
    assert got == want and len(got) == T
    assert want != _engine_run(cfg.with_(release_decay_rule="age"), seed_file, ticks)


@pytest.mark.parametrize("rule", ["drift", "stopped"])
def test_batch_job_with_a_drift_aware_decay_rule_releases_what_the_engine_releases(tmp_path, seed_file, monkeypatch,
                                                                                   rule):
    """release_decay_rule="drift" (the default: the clusters rule, and whole old epochs a permutation test
    under the release's key says the stream drifted away from) and "stopped" (the first epoch judged too, a
    cluster judged once the newer epochs would have released points in it): on a stream in cluster order
    (three clusters, one after the other) the engine's releases differ from the "clusters" rule's, and the
    job's stages, calling the same step, release exactly the engine's."""
    if rule != "drift":  # the default needs no override
        _engine_overrides(monkeypatch, dict(release_decay_rule=rule))
    rng = np.random.default_rng(6)
    T, per = 24, 200
    centers = [(-6.0, -6.0), (6.0, -6.0), (0.0, 7.0)]
    ticks = [rng.normal(size=(per, 2)) * 0.7 + np.array(centers[min(t // 6, 2)]) for t in range(T)]
    got, want, job = _job_and_engine_on(np.vstack(ticks), tmp_path, seed_file, radius=12, k=3, tick_size=per,
                                        horizon=T, epsilon=2)
    cfg = job_mod.engine_config(job)
    assert cfg.release_decay_rule == rule
    assert got == want and len(got) == T
    assert want != _engine_run(cfg.with_(release_decay_rule="clusters"), seed_file, ticks)


def test_batch_job_leaving_coarse_epochs_out_of_the_fit_releases_what_the_engine_releases(tmp_path, seed_file,
                                                                                          monkeypatch):
    """release_min_points=1.5 (an old epoch of fewer than 1.5·k released points leaves the release fit once a
    newer epoch released that many): on a shuffled stream of three clusters whose first epochs are coarse the
    engine's releases differ from the default's, and the job's stages, calling the same release step,
    release exactly the engine's."""
    _engine_overrides(monkeypatch, dict(release_min_points=1.5))
    rng = np.random.default_rng(12)
    T, per = 24, 200
    means = np.array([(-6.0, -6.0), (6.0, -6.0), (0.0, 7.0)])
    ticks = [means[rng.integers(3, size=per)] + rng.normal(size=(per, 2)) * 0.7 for _ in range(T)]
    got, want, job = _job_and_engine_on(np.vstack(ticks), tmp_path, seed_file, radius=12, k=3, tick_size=per,
                                        horizon=T, epsilon=1)
    cfg = job_mod.engine_config(job)
    assert cfg.release_min_points == 1.5
    assert got == want and len(got) == T
    assert want != _engine_run(cfg.with_(release_min_points=0.0), seed_file, ticks)


@pytest.mark.parametrize("runs, extra", [(1, []), (2, []), (1, ["--semicoreset=snap"]), (2, ["--tick_timer=looping"])])
def test_a_job_that_ends_at_its_input_end_releases_what_the_engine_releases_with_the_end(tmp_path, seed_file, runs,
                                                                                          extra, monkeypatch):
    """--end_at_input_end: a file of 13 ticks (the last one half full) under --horizon_ticks 8 × --runs 2, or
    40 (also with the bicriteria's stages, whose tick timer stops at the end too, and with the looping timer
    that closes one tick at a time): the input's last tick is
    the stream's declared end, final in the job's epoch planner as in the engine (``step(x, last=True)``);
    the job closes no tick after it, and its releases are the library's. Without the part sparse vector:
    with it, the engine's release at tick 13 of this stream is the same with and without the end (runs 2),
    so a job that ignored the end would pass (the job with it is tested on its own)."""
    _engine_overrides(monkeypatch, dict(part_fire=0.0))
    X = _blobs(1250, np.random.default_rng(11))
    horizon = 8 if runs == 2 else 40
    np.save(tmp_path / "a.npy", X)
    argv = [f"--input={tmp_path}/a.npy", "--dim=2", "--radius=12", "--k=3", "--tick_size=100",
            f"--horizon_ticks={horizon}", f"--runs={runs}", f"--seed_file={seed_file}", "--epsilon=1",
            f"--output={tmp_path / 'out'}", "--end_at_input_end"] + extra
    _run_batch(argv)
    got = sorted(_read_jsonl(tmp_path / "out" / "releases.jsonl"), key=lambda r: r["global_tick"])
    job, _ = job_mod.parse_args(argv)
    assert job.end_tick == 13
    from dpstream.runs import RunSequence
    seq = RunSequence(job_mod.engine_config(job), load_seed(seed_file))
    ticks = [X[i:i + 100] for i in range(0, 1250, 100)]
    want = [json.loads(json.dumps(seq.step(x, last=g == 13).to_dict())) for g, x in enumerate(ticks, start=1)]
    assert got == want and len(got) == 13
    # without the option the job releases every tick of the horizon, and tick 13 leaves points unreleased
    plain = RunSequence(job_mod.engine_config(job), load_seed(seed_file))
    before = [json.loads(json.dumps(plain.step(x).to_dict())) for x in ticks]
    assert before[:12] == want[:12] and before[12] != want[12]


def test_the_input_end_option_needs_a_public_last_tick(tmp_path):
    base = [f"--output={tmp_path}/out", "--end_at_input_end"]
    job, _ = job_mod.parse_args(base + ["--builtin_n=1000", "--tick_size=300", "--horizon_ticks=10"])
    assert job.end_tick == 4
    job, _ = job_mod.parse_args(base + ["--builtin_n=1000", "--tick_size=300"])  # T = the stream's own 4 ticks
    assert job.end_tick is None
    job, _ = job_mod.parse_args(base[:1] + ["--builtin_n=1000", "--tick_size=300", "--horizon_ticks=10"])
    assert job.end_tick is None  # not asked for: the horizon ends the stream, as before
    with pytest.raises(job_mod.OptionError, match="position clock"):
        job_mod.parse_args(base + ["--input_subscription=projects/p/subscriptions/s", "--horizon_ticks=10",
                                   "--dim=2", "--k=2", "--radius=5"])
