"""The streaming job with a privacy unit (event-time clock, Pub/Sub-like records on a TestStream): the
same releases as the library's bounding and engine for the same seed, ticks and ids (kept records and
tick means; the id from the message attribute or the JSON key); records without an id are
dead-lettered; a unit's records of a tick are decided only at the tick's deadline and stay in it."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                           exc_type=ImportError)

from apache_beam.coders import PickleCoder  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions  # noqa: E402
from apache_beam.testing.test_stream import TestStream as _TestStream  # noqa: E402
from apache_beam.utils.timestamp import Timestamp  # noqa: E402

from dpstream.clock import TickClock  # noqa: E402
from dpstream.contributions import ContributionBounder  # noqa: E402
from dpstream.engine import Engine  # noqa: E402
from pipelines import dp_stream_cluster as job_mod  # noqa: E402
from transforms.cluster import load_seed  # noqa: E402
from transforms.parse import Record  # noqa: E402
from transforms.unit_timers import decision_micros  # noqa: E402
from tests.beam.test_ticks import _counters  # noqa: E402

T0 = 1_800_000_000.0
TICK_S, T = 10, 6


@pytest.fixture
def seed_file(tmp_path):
    p = tmp_path / "seed"
    p.write_text("5b1f0e2c9a8d4c3e9f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6072\n")
    return str(p)


def _records(seed=7, late_half=False):
    """Per tick 30–80 records of 3 blobs from heavy-tailed units (strings and integers); the id as a
    message attribute on half of them, as the JSON key on the rest; a few with none. Distinct times."""
    rng = np.random.default_rng(seed)
    means = np.array([[-5.0, -5.0], [5.0, 5.0], [5.0, -5.0]])
    recs, n = [], 0
    for t in range(1, T + 1):
        if t == 3:
            continue  # an empty tick: the ⊥ heartbeat
        m = int(rng.integers(30, 80))
        X = means[rng.integers(0, 3, m)] + rng.normal(scale=0.5, size=(m, 2))
        lo = TICK_S * 600 if late_half else 1  # late_half: in the tick's last 40 %, after a 5 s watermark jump
        ts = T0 + (t - 1) * TICK_S + np.sort(rng.choice(np.arange(lo, TICK_S * 1000), m, replace=False)) / 1000
        for x, s in zip(X, ts):
            v = int(np.floor(rng.pareto(1.0) * 5))
            pid = f"u{v}" if v < 20 else v
            how = rng.choice(["attribute", "key", "none"], p=[0.48, 0.48, 0.04])
            body = {"x": x.tolist(), "ts": float(s)}
            if how == "key":
                body["user"] = pid
            recs.append((t, float(s), f"m{n:05d}", json.dumps(body), str(pid) if how == "attribute" else None,
                         None if how == "none" else (str(pid) if how == "attribute" else pid), x))
            n += 1
    return recs


def _argv(out, seed_file, extra):
    return ["--input_subscription=projects/p/subscriptions/unused", f"--output={out}", "--dim=2", "--radius=12",
            "--k=3", f"--tick_seconds={TICK_S}", f"--t_start={int(T0)}", f"--horizon_ticks={T}",
            "--allowed_lateness_seconds=0", f"--seed_file={seed_file}", "--epsilon=2", "--privacy_id_field=user",
            *extra]


def _run_stream(recs, out, seed_file, extra, straggler=None, step_us=500_000):
    job, _ = job_mod.parse_args(_argv(out, seed_file, extra))
    os.makedirs(out, exist_ok=True)
    stream = _TestStream(coder=PickleCoder())
    clock = TickClock("event_time", tick_seconds=TICK_S, t_start=job.t_start, horizon_ticks=T)
    for t in range(1, T + 1):
        elems = [beam.window.TimestampedValue(Record(raw, None, s, mid, attr), Timestamp.of(s))
                 for (tt, s, mid, raw, attr, _, _) in recs if tt == t]
        if elems:
            stream = stream.add_elements(elems)
        # past the unit stage's decision time for t (its deadline, to the ms), well before ShardTicks' close
        stream = (stream.advance_processing_time(2)
                  .advance_watermark_to(Timestamp(micros=decision_micros(clock, t, 0.0) + step_us))
                  .advance_processing_time(2))
    if straggler is not None:  # delivered after its tick was decided, before ShardTicks closes the tick
        stragglers = straggler if isinstance(straggler, list) else [straggler]
        stream = (stream.advance_watermark_to(Timestamp(micros=decision_micros(clock, T, 0.0) + 600_000))
                  .advance_processing_time(2)
                  .add_elements([beam.window.TimestampedValue(r, Timestamp.of(r.ts)) for r in stragglers]))
        stream = (stream.advance_processing_time(2)
                  .advance_watermark_to(Timestamp(micros=decision_micros(clock, T, 0.0) + 1_000_000))
                  .advance_processing_time(2))
    stream = stream.advance_watermark_to_infinity()
    opts = PipelineOptions(["--runner=BundleBasedDirectRunner"])
    opts.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(options=opts)
    job_mod.build(p, job, seed_file, source=p | "Events" >> stream)
    result = p.run()
    result.wait_until_finish()
    _run_stream.counters = _counters(result)  # the last run's exact operator counters
    return job, _read(out / "releases.jsonl"), _read(out / "non_private" / "dead_letter.jsonl")


def _read(path):
    """The file's dicts, release-log references resolved (a release repeating the previous tick's
    coreset names that tick instead of repeating the arrays)."""
    from dpstream.release_log import resolve
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        return [d for _, d in resolve([json.loads(line) for line in fh if line.strip()])]


def _library(job, seed_file, recs):
    """Each tick's records with an id, in (ts, message id) order, bounded by ContributionBounder, into the engine."""
    cfg = job_mod.engine_config(job)
    assert cfg.neighbouring == "add_remove"
    eng, b, out = Engine(cfg, load_seed(seed_file)), ContributionBounder(cfg), []
    _library.kept = 0
    for t in range(1, T + 1):
        rows = sorted((r for r in recs if r[0] == t and r[5] is not None), key=lambda r: (r[1], r[2]))
        x = b.bound(np.array([r[6] for r in rows]).reshape(-1, 2), [r[5] for r in rows])
        _library.kept += x.shape[0]
        out.append(json.loads(json.dumps(eng.step(x).to_dict())))
    return out, b.n_dropped


@pytest.mark.parametrize("extra", [["--max_contributions=4", "--max_contributions_per_tick=2"],
                                   ["--max_contributions=3", "--contribution=tick_mean"]])
def test_stream_job_releases_what_the_library_releases(tmp_path, seed_file, extra):
    recs = _records()
    job, got, dead = _run_stream(recs, tmp_path / "out", seed_file, extra)
    want, dropped = _library(job, seed_file, recs)
    assert dropped > 50  # the bounds bite: heavy units lose records in most ticks
    got = sorted(got, key=lambda r: r["tick"])
    assert [r["tick"] for r in got] == list(range(1, T + 1))
    assert got == want
    assert _run_stream.counters["points_processed"] == _library.kept  # every kept point, in its own tick
    assert got[-1]["privacy"]["unit"]["field"] == "user"
    assert sorted((d["message_id"], d["reason"]) for d in dead) == \
        sorted((r[2], "no_privacy_id") for r in recs if r[5] is None)


def test_a_broken_unit_stage_is_caught(tmp_path, seed_file, monkeypatch):
    """The same comparison fails when the stage keeps one record too many per tick (the test can fail)."""
    import transforms.unit_timers as ut
    real = ut.unit_keep
    monkeypatch.setattr(ut, "unit_keep", lambda ticks, L, per_tick, prior=0: real(ticks, L + 1, per_tick + 1, prior))
    recs = _records(seed=8)
    extra = ["--max_contributions=4", "--max_contributions_per_tick=2"]
    job, got, _ = _run_stream(recs, tmp_path / "out", seed_file, extra)
    want, _ = _library(job, seed_file, recs)
    assert sorted(got, key=lambda r: r["tick"]) != want


def test_timestamped_file_job_releases_what_the_library_releases(tmp_path, seed_file):
    """The same stage on a bounded input with the event-time clock (JSON lines with a "ts", the id as a key)."""
    recs = _records(seed=9)
    lines = []
    for (_, s, _, raw, attr, pid, _) in recs:
        body = json.loads(raw)
        if attr is not None:
            body["user"] = pid
        lines.append(json.dumps(body))
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    argv = [a for a in _argv(tmp_path / "out", seed_file, ["--max_contributions=4", "--max_contributions_per_tick=2"])
            if not a.startswith(("--input_subscription", "--allowed_lateness"))] + [f"--input={tmp_path}/in.jsonl"]
    assert "DONE" in str(job_mod.run(argv).state)
    job, _ = job_mod.parse_args(argv)
    got = sorted(_read(tmp_path / "out" / "releases.jsonl"), key=lambda r: r["tick"])
    # a file has no message ids: within a tick the rule orders by ts (the file's order here)
    want, _ = _library(job, seed_file, [r[:2] + ("",) + r[3:] for r in recs])
    assert got == want
    dead = _read(tmp_path / "out" / "non_private" / "dead_letter.jsonl")
    assert len(dead) == sum(r[5] is None for r in recs) and {d["reason"] for d in dead} == {"no_privacy_id"}


def test_the_pubsub_reader_carries_the_id_attribute():
    from apache_beam.io.gcp.pubsub import PubsubMessage
    from pipelines.sources import _pubsub_records
    msg = PubsubMessage(b'{"x": [1, 2]}', {"user": "a91f", "other": "x"}, message_id="m1")
    assert [r.privacy_id for r in _pubsub_records(msg, "user")] == ["a91f"]
    assert [r.privacy_id for r in _pubsub_records(msg, None)] == [None]  # without a unit: nothing carried
    assert [r.privacy_id for r in _pubsub_records(PubsubMessage(b"{}", {"user": ""}), "user")] == [None]


def _straggler_case(tmp_path, seed_file):
    recs = _records(seed=10)
    heavy = max({r[5] for r in recs if r[5] is not None}, key=lambda v: sum(r[5] == v for r in recs))
    s = T0 + (T - 1) * TICK_S + 9.9995  # in the last tick, published before its deadline
    straggler = Record(json.dumps({"x": [4.0, -6.0], "ts": s, "user": heavy}), None, s, "late-1")
    extra = ["--max_contributions=3", "--contribution=tick_mean"]
    job, got, _ = _run_stream(recs, tmp_path / "out", seed_file, extra, straggler)
    want, _ = _library(job, seed_file, recs)
    return sorted(got, key=lambda r: r["tick"]), want, _run_stream.counters["points_processed"], _library.kept


def test_a_straggler_after_the_runs_decision_opens_no_fresh_count(tmp_path, seed_file):
    """A heavy unit's record of the last tick, delivered after the unit's run was decided but before the
    tick closes downstream: dropped (the key remembers the run), so the releases are the library's."""
    got, want, n_job, n_lib = _straggler_case(tmp_path, seed_file)
    assert got == want and n_job == n_lib


def test_forgetting_the_run_at_once_would_let_the_straggler_in(tmp_path, seed_file, monkeypatch):
    import transforms.unit_timers as ut
    monkeypatch.setattr(ut, "forget_micros", lambda clock, tick, *a: ut.decision_micros(clock, tick, 0.0))
    _, _, n_job, n_lib = _straggler_case(tmp_path, seed_file)
    assert n_job == n_lib + 1  # the unit's run gets one more point than L allows


def test_records_without_a_tick_are_dropped_and_counted_before_the_bounds(tmp_path, seed_file):
    """A unit's record published after its tick's deadline, and one outside the horizon: neither reaches the
    ticks nor counts against the unit (releases and points = the library's), each counted."""
    recs = _records(seed=11)
    late = Record(json.dumps({"x": [1.0, 1.0], "ts": T0 + 5.0, "user": "u0"}), None, T0 + 25.0, "late-2")
    far = Record(json.dumps({"x": [1.0, 1.0], "ts": T0 - 100.0, "user": "u0"}), None, T0 + 55.0, "far-1")
    job, got, _ = _run_stream(recs, tmp_path / "out", seed_file, ["--max_contributions=4"], [late, far])
    want, _ = _library(job, seed_file, recs)
    c = _run_stream.counters
    assert sorted(got, key=lambda r: r["tick"]) == want and c["points_processed"] == _library.kept
    assert c["after_deadline"] == 1 and c["outside_horizon"] == 1


def test_a_watermark_jump_past_the_tick_close_loses_no_unit_record(tmp_path, seed_file):
    """The watermark moves 5 s at once, past ShardTicks' close of each tick (its deadline + 2 s): on the local
    runner the unit stage's pending timers hold its output watermark (pipelines/local_runner/holds.py), so
    every kept record still reaches its tick."""
    recs = _records(seed=12, late_half=True)
    job, got, _ = _run_stream(recs, tmp_path / "out", seed_file, ["--max_contributions=4"], step_us=5_000_000)
    want, _ = _library(job, seed_file, recs)
    c = _run_stream.counters
    assert c.get("after_close", 0) == 0 and c["points_processed"] == _library.kept
    assert sorted(got, key=lambda r: r["tick"]) == want


class _Cell:
    """Stand-ins for one key's state, bag and timer: the DoFn is called directly."""

    def __init__(self):
        self.v = None

    def read(self):
        return self.v

    def write(self, v):
        self.v = v

    def clear(self):
        self.v = None


class _Bag:
    def __init__(self):
        self.v = []

    def read(self):
        return list(self.v)

    def add(self, x):
        self.v.append(x)

    def clear(self):
        self.v = []


class _Timer:
    def set(self, t):
        self.t = t


def _decide(order, records, cfg, clock):
    from transforms.unit_timers import _BoundUnitOnTimeFn
    fn = _BoundUnitOnTimeFn(cfg, clock, 5.0, 7.0)
    fn.setup()
    st, bag, tm = _Cell(), _Bag(), _Timer()
    for name in order:
        fn.process(((0, "u"), (1, records[name])), state=st, buf=bag, timer=tm)
    return [p.slot for p in fn.on_tick(fired=tm.t, key=(0, "u"), state=st, buf=bag, timer=tm)]


def test_which_records_of_a_tick_are_kept_does_not_depend_on_their_arrival_order():
    """Two rows of one unit in one tick with the same ts (whole-second GPS logs) and no message id:
    with ℓ = 1 the kept one is the first by position, whichever arrives first (bundle boundaries, which
    other units' records shape, must not decide it)."""
    from dpstream.clock import TickClock
    from dpstream.params import EngineConfig
    from transforms.parse import ParsedPoint

    cfg = EngineConfig(n_clusters=2, dim=2, radius=10.0, epsilon=1.0, horizon_ticks=4, max_contributions=3,
                       max_contributions_per_tick=1, neighbouring="add_remove")
    clock = TickClock("event_time", tick_seconds=10, t_start=100, horizon_ticks=4)
    recs = {"a": ParsedPoint(np.array([1.0, 1.0]), 0, 1001.0, None, None),
            "b": ParsedPoint(np.array([-1.0, -1.0]), 1, 1001.0, None, None)}
    assert _decide("ab", recs, cfg, clock) == _decide("ba", recs, cfg, clock) == [0]
    # stream records (no slot, same ts): the message id decides, not the arrival order
    recs = {"a": ParsedPoint(np.array([1.0, 1.0]), None, 1001.0, "m2", 1001.0),
            "b": ParsedPoint(np.array([-1.0, -1.0]), None, 1001.0, "m1", 1001.0)}
    assert _decide("ab", recs, cfg, clock) == _decide("ba", recs, cfg, clock) == [None]


def test_a_decided_run_is_remembered_for_a_whole_further_run():
    """A key forgets its decided run only a whole run after ShardTicks closes the run's last tick, so a
    straggler cannot open a fresh count unless the two stages' watermarks drift apart by a run."""
    from dpstream.clock import TickClock
    from transforms.unit_timers import decision_micros, forget_micros

    T = 6
    clock = TickClock("event_time", tick_seconds=10, t_start=100, horizon_ticks=2 * T)
    close_delay = 7.0
    shard_close_of_last = decision_micros(clock, T, close_delay)
    assert forget_micros(clock, T, close_delay, T) >= shard_close_of_last + T * clock.tick_us
