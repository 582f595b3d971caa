"""Two admission leaks, fixed (P4).

Leak 1 — a redelivery counted twice: the job remembered Pub/Sub message ids for a fixed 600 s
whatever the tick length, and accepted a payload ``ts`` in the future, so a redelivery 700 s later
landed again in an hourly tick that was still open. Now the dedup window comes from public
parameters (``redelivery_window``) and a ``ts`` later than the publish time plus the public skew
is dead-lettered (``ts_in_future``).

Leak 2 — one record decided other records' admission: the lateness deadline was checked against
the wall clock when ``BatchIntoTicks`` flushed its bundle, so one slow record (an 8 MB malformed
message that took 0.3 s to parse) made every other record of that bundle near its deadline late
(50 of 50 admitted without it, 0 of 50 with it). Now each record is admitted by its own publish
time against its tick's public deadline.

Every test here fails on the code before the fix. No test measures wall time: the job-level runs
use the runner's test clock (``runner_clock``), the slow parse is a fake one that moves a fake clock.
"""
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

from pipelines import dp_stream_cluster as job_mod  # noqa: E402
from tests.beam.runner_clock import runner_clock  # noqa: E402
from tests.beam.test_pipeline import _engine_releases, _read_jsonl  # noqa: E402
from tests.beam.test_ticks import _counters  # noqa: E402
from transforms.parse import ParsePoints, Record, parse_record  # noqa: E402
from transforms.dedup import DedupByMessageId  # noqa: E402
from transforms.ticks import BatchIntoTicks, TickClock  # noqa: E402

HOUR = 3600.0
T0 = 4_102_444_800.0  # 2100-01-01T00:00:00Z: the hourly ticks' deadlines lie in this machine's future


@pytest.fixture
def seed_file(tmp_path):
    p = tmp_path / "seed"
    p.write_text("3b9d0e7f1a2c4b6d8e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c0f1e2d\n")
    return str(p)


# --------------------------------------------------------------------------- leak 1: the window, in numbers

def test_the_dedup_window_is_derived_from_public_parameters():
    from transforms.dedup import redelivery_window
    assert redelivery_window(3600.0, 7.0, 5.0) == (3617.0, 3612.0)  # (ttl, max_age)
    assert redelivery_window(10.0, 7.0, 0.0) == (17.0, 17.0)
    for bad in (dict(tick_seconds=0.0), dict(close_delay_seconds=-1.0), dict(max_clock_skew_seconds=float("inf"))):
        kw = dict(tick_seconds=10.0, close_delay_seconds=7.0, max_clock_skew_seconds=5.0) | bad
        with pytest.raises(ValueError):
            redelivery_window(**kw)
    # the job: tick + close delay (allowed lateness + 2 panes) + the skew, never a fixed 600 s
    for tick_s, late_s, skew in ((3600.0, 5.0, 5.0), (10.0, 5.0, 5.0), (86400.0, 60.0, 2.0)):
        job, _ = job_mod.parse_args(["--input_subscription=projects/p/subscriptions/s", "--output=o", "--dim=2",
                                     "--radius=1", f"--tick_seconds={tick_s}", "--t_start=0",
                                     "--horizon_ticks=3", f"--allowed_lateness_seconds={late_s}",
                                     f"--max_clock_skew_seconds={skew}"])
        ttl, max_age = job_mod.dedup_window(job)
        assert max_age == tick_s + late_s + 2 * job_mod.PANE_SECONDS + skew and ttl == max_age + skew
        assert ttl > tick_s + late_s + skew


def test_a_redelivery_after_the_ttl_is_past_its_ticks_deadline_and_close():
    """For every publish time P, payload ts ≤ P + skew (ParsePoints enforces it), worker clock off the
    server's by up to the skew and any delivery delay: a redelivery that arrives once the dedup has
    forgotten the message (ttl after it first saw it) is at or past P + max_age — which the dedup drops —
    and past its tick's deadline and the close of its tick by the clock the DirectRunner's watermark follows."""
    from transforms.dedup import redelivery_window
    tick_s, lateness, skew = 3600.0, 5.0, 5.0
    close_delay = lateness + 2.0
    ttl, max_age = redelivery_window(tick_s, close_delay, skew)
    clock = TickClock("event_time", tick_seconds=tick_s, t_start=TickClock.t_start_for(T0, tick_s), horizon_ticks=10)
    rng = np.random.default_rng(0)
    for _ in range(2000):
        P = T0 + rng.uniform(0, 5 * tick_s)                       # the server's publish time
        ts = P + rng.choice([skew, 0.0, -rng.uniform(0, 2 * tick_s), rng.uniform(-skew, skew)])  # ≤ P + skew
        offset = rng.uniform(-skew, skew)                          # worker clock − server clock
        first_seen = P + rng.choice([0.0, rng.exponential(30.0), rng.uniform(0, max_age)]) + offset
        redelivered = first_seen + ttl                             # the earliest it is forgotten
        tick = clock.tick_of(ts=ts)
        if tick is None:
            continue
        assert redelivered >= P + max_age - 1e-6                  # the dedup drops it (after_dedup_ttl)
        assert redelivered > float(clock.deadline(tick, lateness))
        assert redelivered >= float(clock.tick_end(tick)) + close_delay - 1e-6  # ClusterTicks has closed it


class _Cell:
    def __init__(self):
        self.value = None

    def read(self):
        return self.value

    def write(self, v):
        self.value = v

    def clear(self):
        self.value = None

    def set(self, t):  # as a timer
        self.value = t


def test_the_stateful_dedup_drops_a_redelivery_within_and_after_its_window():
    """The dedup DoFn by hand: hourly ticks, first delivery, a redelivery 700 s later (remembered), and
    one after the ttl, once the expiry timer has cleared the id (too old: after_dedup_ttl). The old fixed
    600 s window without the age check lets the +700 s redelivery through."""
    from transforms.dedup import _make_stateful_dedup_fn, redelivery_window
    ttl, max_age = redelivery_window(HOUR, 7.0, 5.0)
    now = {"t": T0 + 61.0}
    rec = Record('{"x": [1, 2]}', None, T0 + 60.0, "17")  # published at T0 + 60

    def run(fn, deliveries):
        fn.setup()
        seen, timer, out = _Cell(), _Cell(), []
        for at in deliveries:
            if timer.value is not None and timer.value <= Timestamp.of(at):
                fn.expire(seen=seen)   # the REAL_TIME timer fires first
                timer.value = None
            now["t"] = at
            out += list(fn.process(("17@" + repr(rec.ts), rec), seen=seen, expiry=timer))
        return len(out)

    cls = _make_stateful_dedup_fn("t_leak1")
    fixed = run(cls(ttl, "", max_age, lambda: now["t"]), [T0 + 61.0, T0 + 761.0, T0 + 61.0 + ttl + 1.0])
    assert fixed == 1
    old = run(cls(600.0, "", None, lambda: now["t"]), [T0 + 61.0, T0 + 761.0])
    assert old == 2  # the leak, as it was: the id forgotten after 600 s, the tick still open


def test_the_stateful_dedup_needs_a_window():
    with pytest.raises(ValueError, match="redelivery_window"):
        DedupByMessageId(mode="stateful")
    p = beam.Pipeline()
    stream = p | _TestStream(coder=PickleCoder()).add_elements([Record("1,2", None, 1.0, "a")])
    with pytest.raises(ValueError, match="ttl_seconds"):
        _ = stream | DedupByMessageId()  # auto on unbounded input: stateful, and no silent 600 s default


def test_a_payload_ts_later_than_the_publish_time_plus_the_skew_is_dead_lettered():
    P = T0 + 100.0
    ok = parse_record(Record(json.dumps({"x": [1, 2], "ts": P + 5.0}), None, P, "a"), 2, max_clock_skew_seconds=5.0)
    assert len(ok[0]) == 1 and ok[0][0].ts == P + 5.0 and ok[0][0].publish_time == P and ok[1] == []
    past = parse_record(Record(json.dumps({"x": [1, 2], "ts": P - 9999.0}), None, P, "a"), 2, max_clock_skew_seconds=5.0)
    assert len(past[0]) == 1 and past[0][0].publish_time == P  # an old ts is fine: its deadline is earlier
    _, dead = parse_record(Record(json.dumps({"x": [1, 2], "ts": P + 5.001}), None, P, "b"), 2,
                           max_clock_skew_seconds=5.0)
    assert [(d["reason"], d["ts"], d["message_id"]) for d in dead] == [("ts_in_future", P + 5.001, "b")]
    assert "publish time" in dead[0]["detail"]
    # no publish time (a file) or no skew given: nothing to compare
    assert parse_record(Record(json.dumps({"x": [1, 2], "ts": P + 1e6}), 3), 2, max_clock_skew_seconds=5.0)[1] == []
    assert parse_record(Record(json.dumps({"x": [1, 2], "ts": P + 1e6}), None, P), 2)[1] == []
    # a numpy record's rows carry the publish time too
    (b,), _ = parse_record(Record(np.ones((3, 2)), None, P, "n"), 2, batch_arrays=True)
    assert b.publish_time == P == b.ts


# --------------------------------------------------------------------------- leak 1 (and 2), through the job

N_ORIG = 40
# (ttl, max_age) the job must use for hourly ticks, 5 s lateness, 2 panes of 1 s and 5 s of skew
HOURLY_WINDOW = (HOUR + 5.0 + 2.0 + 2 * 5.0, HOUR + 5.0 + 2.0 + 5.0)


def _pubsub_record(x, published, mid, ts=None):
    body = {"x": list(map(float, x))} if ts is None else {"x": list(map(float, x)), "ts": ts}
    return Record(json.dumps(body), None, published, mid)


@pytest.fixture(scope="module")
def hourly_run(tmp_path_factory):
    """The streaming job over hourly ticks (T = 2), on the runner's test clock, with: N_ORIG messages
    published at T0 + 60 … + 99 and delivered at T0 + 100; a redelivery of a quarter of them 700 s later
    (tick 1 still open); a record whose ts is 2890 s after its publish time; a record of tick 1
    published after tick 1's deadline; and, once the dedup has forgotten them, another quarter redelivered
    while the watermark still holds tick 1 open. Returns (job, seed, X, releases, dead letters, counters)."""
    from pipelines.local_runner.metrics import install
    tmp = tmp_path_factory.mktemp("hourly")
    seed = tmp / "seed"
    seed.write_text("c0ffee11d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c60f1e2\n")
    out = tmp / "out"
    os.makedirs(out)
    argv = ["--input_subscription=projects/p/subscriptions/unused", f"--output={out}", "--dim=2", "--radius=12",
            "--k=3", f"--tick_seconds={HOUR:g}", f"--t_start={T0:.0f}", "--horizon_ticks=2",
            "--allowed_lateness_seconds=5", f"--seed_file={seed}"]  # --max_clock_skew_seconds: default 5
    job, _ = job_mod.parse_args(argv)
    ttl, max_age = HOURLY_WINDOW
    rng = np.random.default_rng(21)
    X = np.array([[-5.0, -5.0], [5.0, 5.0], [5.0, -5.0]])[rng.integers(0, 3, N_ORIG)] + rng.normal(0, .5, (N_ORIG, 2))
    orig = [_pubsub_record(X[i], T0 + 60.0 + i, f"m{i}") for i in range(N_ORIG)]
    future = _pubsub_record([1.0, 1.0], T0 + 790.0, "future", ts=T0 + 790.0 + 2890.0)   # ts in tick 1 + 1 h
    late = _pubsub_record([2.0, 2.0], T0 + HOUR + 5.0 + 1.0, "late", ts=T0 + 100.0)     # of tick 1, published late

    def tv(recs):
        return [beam.window.TimestampedValue(r, Timestamp.of(r.ts)) for r in recs]
    start = T0 + 100.0  # the runner's (test) clock when the first messages arrive
    stream, now = _TestStream(coder=PickleCoder()), [start]

    def at(t, recs):  # deliver recs when the runner's clock reads t
        nonlocal stream
        stream = stream.advance_processing_time(t - now[0]).add_elements(tv(recs))
        now[0] = t
    stream = stream.add_elements(tv(orig))
    at(start + 700.0, orig[::4] + [future])   # 700 s later: tick 1 still open
    at(T0 + HOUR + 6.5, [late])               # published (and delivered) after tick 1's deadline
    at(start + ttl + 1.0, orig[1::4])         # the ids forgotten; the watermark still holds tick 1 open
    stream = (stream.advance_processing_time(2)
              .advance_watermark_to(Timestamp.of(T0 + HOUR + job_mod.close_delay_seconds(job) + 1))
              .advance_processing_time(2)
              .advance_watermark_to_infinity())
    install()
    opts = PipelineOptions(["--runner=BundleBasedDirectRunner"])
    opts.view_as(StandardOptions).streaming = True
    with runner_clock(start):
        p = beam.Pipeline(options=opts)
        job_mod.build(p, job, str(seed), source=p | "Events" >> stream)
        result = p.run()
        result.wait_until_finish()
    rels = sorted(_read_jsonl(out / "releases.jsonl"), key=lambda r: r["tick"])
    dead = _read_jsonl(out / "non_private" / "dead_letter.jsonl")
    return job, str(seed), X, rels, dead, _counters(result), (ttl, max_age)


def test_hourly_ticks_a_redelivery_700_s_later_counts_once(hourly_run):
    job, seed, X, rels, _, c, _ = hourly_run
    assert [r["tick"] for r in rels] == [1, 2]
    assert rels == _engine_releases(job, seed, {1: X}), "a redelivered message counted twice"
    assert c["redeliveries_dropped"] == N_ORIG // 4       # the +700 s redeliveries: remembered
    assert job_mod.dedup_window(job) == HOURLY_WINDOW


def test_a_redelivery_after_the_ttl_into_a_tick_still_open_is_dropped(hourly_run):
    """The dedup forgot the ids (its ttl ran out) while the watermark kept tick 1 open at the closing
    stage: only the age check stands between them and a second count."""
    *_, c, (ttl, max_age) = hourly_run
    assert c.get("after_dedup_ttl", 0) == N_ORIG // 4
    assert c["points_processed"] == N_ORIG


def test_a_ts_far_in_the_future_is_dead_lettered(hourly_run):
    *_, dead, c, _ = hourly_run
    assert [(d["reason"], d["message_id"]) for d in dead] == [("ts_in_future", "future")]
    assert c["dead_letter_ts_in_future"] == 1


def test_a_record_published_after_its_ticks_deadline_is_dropped_while_the_tick_is_open(hourly_run):
    """Admission is by the record's own publish time: the closing stage still held tick 1 open (and
    the machine's clock was far before the deadline), yet a record published after it is late."""
    *_, c, _ = hourly_run
    assert c.get("after_deadline", 0) == 1


# --------------------------------------------------------------------------- leak 2: the experiment

SLOW_S = 0.3                       # what parsing the 8 MB malformed message took in the experiment
_STAGE_CLOCK = {"now": 0.0}        # the stage's wall clock (module state: the runner runs in this process)
_ADMITTED: list = []


def _stage_now() -> float:
    return _STAGE_CLOCK["now"]


class _FakeSlowParse(beam.DoFn):
    """Passes records on; the huge one 'takes' SLOW_S seconds of the stage's (fake) wall clock, as its
    real parse did, before any record of its bundle reaches BatchIntoTicks."""

    def process(self, rec):
        if isinstance(rec.raw, bytes) and len(rec.raw) > 1 << 20:
            _STAGE_CLOCK["now"] += SLOW_S
        yield rec


def _collect(kv):
    (_, tick), part = kv
    _ADMITTED.extend((tick, tuple(row)) for row in part.tolist())


def _experiment(with_slow: bool):
    """50 records of tick 1 published 0.1 s before its deadline, reaching the stage at once, in one
    bundle; with or without an 8 MB malformed message in the same bundle."""
    from pipelines.local_runner.metrics import install
    clock = TickClock("event_time", tick_seconds=10.0, t_start=10, horizon_ticks=3)  # tick 1 = [100, 110)
    deadline = float(clock.deadline(1, 5.0))                                          # 115
    published = deadline - 0.1
    recs = [_pubsub_record([float(i), 0.0], published, f"m{i}", ts=109.5) for i in range(50)]
    if with_slow:
        recs.insert(25, Record(b"{" + b"x" * (8 << 20), None, published, "huge"))     # 8 MB, malformed
    _STAGE_CLOCK["now"] = published
    _ADMITTED.clear()
    stream = (_TestStream(coder=PickleCoder())
              .add_elements([beam.window.TimestampedValue(r, Timestamp.of(published)) for r in recs])
              .advance_processing_time(2).advance_watermark_to_infinity())
    install()
    opts = PipelineOptions(["--runner=BundleBasedDirectRunner"])
    opts.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(options=opts)
    parsed = p | stream | beam.ParDo(_FakeSlowParse()) | ParsePoints(2)
    _ = (parsed.points
         | BatchIntoTicks("event_time", tick_seconds=10.0, t_start=10, horizon_ticks=3, dim=2,
                          allowed_lateness_seconds=5.0, now_fn=_stage_now)
         | beam.Map(_collect))
    result = p.run()
    result.wait_until_finish()
    return sorted(_ADMITTED), _STAGE_CLOCK["now"] - deadline, _counters(result)


def test_a_slow_record_in_the_bundle_does_not_change_which_records_are_admitted():
    without, _, c0 = _experiment(with_slow=False)
    with_slow, past_deadline, c1 = _experiment(with_slow=True)
    assert past_deadline == pytest.approx(SLOW_S - 0.1)  # the stage's clock did pass the deadline
    assert len(without) == 50, f"{len(without)} of 50 admitted without the slow record"
    assert with_slow == without, f"{len(with_slow)} of 50 admitted with the slow record in the bundle"
    assert c1["dead_letter_malformed_json"] == 1
    # the stage's wall clock is telemetry only: it saw all 50 arrive after their deadline, and admitted them
    assert c1.get("arrived_after_deadline", 0) == 50 and c0.get("arrived_after_deadline", 0) == 0
    assert c1.get("after_deadline", 0) == c0.get("after_deadline", 0) == 0
