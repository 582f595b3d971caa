"""BatchIntoTicks and DedupByMessageId: ticks from the record alone, a public horizon, public
deadlines, deterministic batches, and Pub/Sub redeliveries counted once."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam transforms cannot run",
                          exc_type=ImportError)

from apache_beam.metrics.metric import MetricsFilter  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions  # noqa: E402
from apache_beam.testing import test_pipeline  # noqa: E402
from apache_beam.testing.test_stream import TestStream as _TestStream  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402
from apache_beam.utils.timestamp import Timestamp  # noqa: E402

from transforms.parse import ParsedBatch, ParsedPoint, ParsePoints, Record, records_from_lines  # noqa: E402
from transforms.dedup import DedupByMessageId  # noqa: E402
from transforms.ticks import BatchIntoTicks, TickClock, _AssignTicksFn, _MergeTickFn, Partial  # noqa: E402

DIM = 2


def _pipeline(runner="DirectRunner", streaming=False):
    opts = PipelineOptions([f"--runner={runner}"])
    opts.view_as(StandardOptions).streaming = streaming
    return test_pipeline.TestPipeline(options=opts)


def _counters(result):
    out = {}
    for c in result.metrics().query(MetricsFilter().with_namespace("dpstream"))["counters"]:
        out[c.key.metric.name] = out.get(c.key.metric.name, 0) + c.committed
    return out


def _pt(slot=None, ts=None, mid=None, x=None, pub=None):
    x = [float(slot), -float(slot)] if x is None else x
    return ParsedPoint(np.array(x, dtype=np.float64), slot, ts, mid, pub)


# --------------------------------------------------------------------------- the clock

def test_position_clock_is_one_based_and_bounded_by_the_horizon():
    c = TickClock("position", tick_size=3, horizon_ticks=2)
    assert [c.tick_of(slot=s) for s in range(8)] == [1, 1, 1, 2, 2, 2, None, None]
    assert c.tick_of(slot=None) is None and c.tick_of(slot=-1) is None
    np.testing.assert_array_equal(c.ticks(np.array([0, 2, 3, 5, 6, -1]), np.full(6, np.nan)), [1, 1, 2, 2, 3, 0])
    assert c.tick_start(1) == Timestamp(0) and c.tick_start(3) == Timestamp(2)


def test_event_time_clock_uses_the_public_t_start_and_the_microsecond_grid():
    t_start = TickClock.t_start_for(1000.0, 0.1)
    assert t_start == 10_000
    c = TickClock("event_time", tick_seconds=0.1, t_start=t_start, horizon_ticks=5)
    assert c.tick_of(ts=1000.0) == 1
    assert c.tick_of(ts=1000.0999) == 1
    assert c.tick_of(ts=1000.1) == 2          # 1000.1 / 0.1 = 10000.999… in floating point
    assert c.tick_of(ts=1000.3) == 4
    assert c.tick_of(ts=1000.4999) == 5
    assert c.tick_of(ts=1000.5) is None       # tick 6 > horizon
    assert c.tick_of(ts=999.9999) is None     # tick 0 < 1
    assert c.tick_of(ts=float("nan")) is None and c.tick_of(ts=None) is None and c.tick_of(ts=1e300) is None
    c0 = TickClock("event_time", tick_seconds=0.1, t_start=0, horizon_ticks=10)
    assert c0.tick_of(ts=0.3) == 4            # floor(0.3 / 0.1) = 2 would put it in tick 3
    assert c.tick_start(2) == Timestamp(1000.1)
    assert c.deadline(1, 30.0) == pytest.approx(1030.1)


def test_shards_are_a_function_of_the_record():
    c = TickClock("position", tick_size=10, horizon_ticks=5, n_shards=4)
    p = np.zeros(DIM)
    assert [c.shard_of(s, "id", p, None) for s in range(6)] == [0, 1, 2, 3, 0, 1]
    a = c.shard_of(None, "msg-17", p, 1.0)
    assert a == c.shard_of(None, "msg-17", p + 5, 99.0) and 0 <= a < 4   # the id alone decides
    assert len({c.shard_of(None, f"m{i}", p, None) for i in range(64)}) == 4


@pytest.mark.parametrize("kwargs", [
    dict(clock="position", horizon_ticks=3),                                   # no tick_size
    dict(clock="position", tick_size=0, horizon_ticks=3),
    dict(clock="position", tick_size=2, horizon_ticks=0),
    dict(clock="position", tick_size=2, horizon_ticks=3, tick_seconds=1.0),
    dict(clock="event_time", tick_seconds=1.0, horizon_ticks=3),               # no t_start
    dict(clock="event_time", tick_seconds=1e-9, t_start=0, horizon_ticks=3),   # below Beam's resolution
    dict(clock="event_time", tick_seconds=-1.0, t_start=0, horizon_ticks=3),
    dict(clock="position", tick_size=2, horizon_ticks=3, allowed_lateness_seconds=5.0),
    dict(clock="position", tick_size=2, horizon_ticks=3, emit_empty_ticks=True),  # needs dim
    dict(clock="position", tick_size=2, horizon_ticks=3, n_shards=0),
    dict(clock="wallclock", tick_size=2, horizon_ticks=3),
])
def test_bad_configuration_is_refused(kwargs):
    with pytest.raises(ValueError):
        BatchIntoTicks(**kwargs)


# --------------------------------------------------------------------------- the DoFns, directly

def _assign(fn, elements):
    """Drive _AssignTicksFn by hand: {(shard, tick): [partials]} from process() and finish_bundle()."""
    fn.setup()
    fn.start_bundle()
    emitted = []
    for e in elements:
        emitted += [(tv.value, tv.timestamp) for tv in fn.process(e)]
    emitted += [(wv.value, wv.timestamp) for wv in fn.finish_bundle()]
    out = {}
    for (key, part), stamp in emitted:
        assert stamp == fn.clock.tick_start(key[1])
        out.setdefault(key, []).append(part)
    return out


def test_assign_drops_outside_horizon_and_published_after_deadline_without_merging_into_other_ticks():
    clock = TickClock("event_time", tick_seconds=10.0, t_start=10, horizon_ticks=3)   # ticks: [100,110) [110,120) [120,130)
    pts = [_pt(0, 99.0), _pt(1, 100.0), _pt(2, 115.0), _pt(3, 125.0), _pt(4, 130.0), _pt(5, None)]
    out = _assign(_AssignTicksFn(clock, DIM, None, None, ""), pts)
    assert sorted(out) == [(0, 1), (0, 2), (0, 3)]
    assert [p.slots.tolist() for p in out[(0, 1)]] == [[1]]       # ts 99 is not merged into tick 1
    assert [p.slots.tolist() for p in out[(0, 3)]] == [[3]]       # ts 130 is not merged into tick 3

    # a public deadline: tick k admits a record published by (t_start + k) * 10 s + 5 s; the stage's
    # own wall clock (here far past every deadline) plays no part
    def published(at):
        return [p._replace(publish_time=at) for p in pts]
    far_future = lambda: 1e12  # noqa: E731
    late = _assign(_AssignTicksFn(clock, DIM, 5.0, far_future, ""), published(124.0))
    assert sorted(late) == [(0, 2), (0, 3)]                        # tick 1 closed at 115
    late = _assign(_AssignTicksFn(clock, DIM, 5.0, far_future, ""), published(125.0))
    assert sorted(late) == [(0, 2), (0, 3)]                        # tick 2 is open until 125 inclusive
    late = _assign(_AssignTicksFn(clock, DIM, 5.0, far_future, ""), published(125.5))
    assert sorted(late) == [(0, 3)]
    # record by record, in one bundle: each by its own publish time
    mixed = [_pt(6, 112.0, pub=125.0), _pt(7, 113.0, pub=125.001), _pt(8, 119.0, pub=90.0)]
    got = _assign(_AssignTicksFn(clock, DIM, 5.0, None, ""), mixed)
    assert [p.slots.tolist() for p in got[(0, 2)]] == [[6, 8]]
    # the rows of a numpy message share its publish time
    batches = [ParsedBatch(np.ones((2, DIM)), np.array([10, 11]), 112.0, "b1", 125.0),
               ParsedBatch(np.ones((3, DIM)), np.array([12, 13, 14]), 112.0, "b2", 125.5)]
    got = _assign(_AssignTicksFn(clock, DIM, 5.0, None, ""), batches)
    assert [p.slots.tolist() for p in got[(0, 2)]] == [[10, 11]]
    # with a deadline, a record without a publish time cannot be judged: dropped (no_clock)
    assert _assign(_AssignTicksFn(clock, DIM, 5.0, None, ""), [_pt(9, 112.0)]) == {}
    assert _assign(_AssignTicksFn(clock, DIM, 5.0, None, ""), [ParsedBatch(np.ones((2, DIM)), np.array([15, 16]),
                                                                         112.0, "b3")]) == {}


def test_buffer_flushes_do_not_change_the_batches():
    clock = TickClock("position", tick_size=4, horizon_ticks=3, n_shards=2)
    rng = np.random.default_rng(3)
    pts = [_pt(int(s)) for s in rng.permutation(14)]
    merge = _MergeTickFn(clock)

    def batches(max_buffer):
        parts = _assign(_AssignTicksFn(clock, DIM, None, None, "", max_buffer=max_buffer), pts)
        return {k: next(iter(merge.process((k, v)))).value[1].tolist() for k, v in parts.items()}, parts
    whole, parts_whole = batches(1 << 16)
    split, parts_split = batches(3)
    assert max(len(v) for v in parts_split.values()) > 1 and all(len(v) == 1 for v in parts_whole.values())
    assert split == whole
    assert whole == {(s % 2, s // 4 + 1): [[float(t), -float(t)] for t in range(12) if t % 2 == s % 2 and t // 4 == s // 4]
                     for s in range(12)}


def test_merge_is_deterministic_whatever_the_bundle_split_and_order():
    rng = np.random.default_rng(0)
    n = 50
    pts = rng.normal(size=(n, DIM))
    slots = rng.permutation(1000)[:n].astype(np.int64)
    ts = np.full(n, np.nan)
    mids = np.array([""] * n)
    want = pts[np.argsort(slots)]
    fn = _MergeTickFn(TickClock("position", tick_size=1000, horizon_ticks=1))
    for trial in range(5):
        perm = rng.permutation(n)
        cuts = np.sort(rng.choice(np.arange(1, n), size=trial, replace=False))
        parts = [Partial(pts[i], slots[i], ts[i], mids[i]) for i in np.split(perm, cuts)]
        (tv,) = list(fn.process(((0, 1), parts)))
        (key, got) = tv.value
        assert key == (0, 1) and tv.timestamp == Timestamp(0)
        np.testing.assert_array_equal(got, want)
    # without slots: ordered by (ts, message id, coordinates)
    parts = [Partial(np.array([[2.0, 0.0], [1.0, 0.0], [0.0, 9.0]]), np.array([-1, -1, -1]),
                      np.array([5.0, 5.0, 4.0]), np.array(["b", "a", "z"]))]
    (tv,) = list(fn.process(((0, 1), parts)))
    np.testing.assert_array_equal(tv.value[1], [[0.0, 9.0], [1.0, 0.0], [2.0, 0.0]])


# --------------------------------------------------------------------------- batch pipelines
#
# Pipelines cost seconds each, so every batch scenario runs in one DirectRunner pipeline (a module
# fixture); each scenario's output is handed to the tests through ``assert_that`` with a matcher that
# saves it, and the tests below check it.

class _Save:
    """An ``assert_that`` matcher that stores the PCollection's contents in a file."""

    def __init__(self, path):
        self.path = str(path)

    def __call__(self, actual):
        with open(self.path, "wb") as f:
            pickle.dump(list(actual), f)


N_SHARDS, TICK_SIZE, HORIZON = 2, 3, 3
POS = dict(clock="position", tick_size=TICK_SIZE, horizon_ticks=HORIZON, n_shards=N_SHARDS)
EVT = dict(clock="event_time", tick_seconds=10.0, t_start=10, horizon_ticks=3, n_shards=1)  # [100,110) [110,120) [120,130)
IND_POS = dict(clock="position", tick_size=4, horizon_ticks=5, n_shards=3)
IND_EVT = dict(clock="event_time", tick_seconds=10.0, t_start=10, horizon_ticks=5, n_shards=3)


def _independence_inputs():
    # position clock: a file of 20 lines with line 5 corrupted
    corrupted = [f"{s},{s * 10}" for s in range(20)]
    corrupted[5] = '{"x": [5, NaN]}'
    # event time: a stream of 20 records with one extra record inserted early in arrival order
    events = [Record(f'{{"x": [{i}, {i * 10}], "ts": {100.0 + 2.5 * i}}}', message_id=f"m{i}") for i in range(20)]
    inserted = events[:2] + [Record('{"x": [-1, -1], "ts": 101.0}', message_id="extra")] + events[2:]
    return {"B": (records_from_lines(corrupted), IND_POS), "D": (inserted, IND_EVT)}


def _redelivery_inputs():
    recs = [Record(f'{{"x": [{i}, 0], "ts": {100.0 + i}}}', None, 100.0 + i, f"m{i}") for i in range(6)]
    return recs + [recs[2], recs[2], recs[4]] + [Record("9,9", slot=None, ts=103.0, message_id=None)]


REDELIVERY_TICKS = dict(clock="event_time", tick_seconds=2.0, t_start=50, horizon_ticks=5)
# within a tick: by slot (none here), then ts, then message id ("" for none), then coordinates
REDELIVERY_WANT = [((0, 1), [[0.0, 0.0], [1.0, 0.0]]), ((0, 2), [[2.0, 0.0], [9.0, 9.0], [3.0, 0.0]]),
                   ((0, 3), [[4.0, 0.0], [5.0, 0.0]])]


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """One batch pipeline for every batch scenario: returns ({label: outputs}, counters)."""
    path = tmp_path_factory.mktemp("batch") / "outputs.pkl"
    p = _pipeline()
    outs = []

    def out(label, pcoll, stamp=False):
        outs.append(pcoll | f"Label_{label}" >> beam.ParDo(_Labelled(label, stamp)))

    # 1. position clock, 2 shards, one malformed line, records arriving shuffled
    lines = [f"{s},{-s}" for s in range(11)]
    lines[4] = "garbage"                                      # dead-lettered: keeps slot 4
    recs = records_from_lines(lines)
    shuffled = [recs[i] for i in np.random.default_rng(1).permutation(len(recs))]
    pts = (p | "CreatePos" >> beam.Create(shuffled) | "ParsePos" >> ParsePoints(DIM)).points
    out("pos", pts | "Pos" >> BatchIntoTicks(label_prefix="pos_", **POS), stamp=True)
    out("full", pts | "Full" >> BatchIntoTicks(dim=DIM, emit_empty_ticks=True, label_prefix="full_", **POS))

    # 2. event time: horizon, and a public deadline (tick k admits records published by (10 + k) * 10 s
    # + 5 s): every record published at 124 (its carrier time), the stage's wall clock long past them all
    evts = [Record(f'{{"x": [{i}, 0], "ts": {ts}}}', slot=i, ts=124.0)
            for i, ts in enumerate([95.0, 100.0, 112.0, 119.9, 121.0, 131.0])]
    epts = (p | "CreateEvt" >> beam.Create(evts) | "ParseEvt" >> ParsePoints(DIM, label_prefix="evt_")).points
    out("evt_all", epts | "EvtAll" >> BatchIntoTicks(label_prefix="all_", **EVT))
    out("evt_late", epts | "EvtLate" >> BatchIntoTicks(label_prefix="late_", allowed_lateness_seconds=5.0,
                                                       now_fn=lambda: 1e12, **EVT))   # tick 1 closed at 115

    # 3. one record dead-lettered (position) / inserted (event time)
    for lab, (rs, kw) in _independence_inputs().items():
        ipts = (p | f"Create{lab}" >> beam.Create(rs) | f"Parse{lab}" >> ParsePoints(DIM, label_prefix=lab)).points
        out(lab, ipts | f"Tick{lab}" >> BatchIntoTicks(label_prefix=f"{lab}_", **kw))

    # 4. Pub/Sub redeliveries, deduplicated in batch mode before parsing
    dpts = (p | "CreateDup" >> beam.Create(_redelivery_inputs()) | "Dedup" >> DedupByMessageId(label_prefix="dup_")
            | "ParseDup" >> ParsePoints(DIM, label_prefix="dup_")).points
    out("dup", dpts | "TickDup" >> BatchIntoTicks(label_prefix="dup_", **REDELIVERY_TICKS))

    assert_that(outs | beam.Flatten(), _Save(path))
    result = p.run()
    result.wait_until_finish()
    with open(path, "rb") as f:
        rows = pickle.load(f)
    by_label = {}
    for label, item in rows:
        by_label.setdefault(label, []).append(item)
    return by_label, _counters(result)


class _Labelled(beam.DoFn):
    def __init__(self, label, stamp):
        self.label, self.stamp = label, stamp

    def process(self, kv, timestamp=beam.DoFn.TimestampParam):
        yield (self.label, (kv[0], kv[1], float(timestamp.micros) / 1e6) if self.stamp else kv)


def test_position_clock_batches_by_shard_and_tick_sorted_by_slot(batch):
    outs, c = batch
    want = {}
    for s in range(11):
        if s != 4 and s // TICK_SIZE + 1 <= HORIZON:
            want.setdefault((s % N_SHARDS, s // TICK_SIZE + 1), []).append([float(s), float(-s)])
    got = {}
    for key, pts, stamp in outs["pos"]:
        assert key not in got, f"two batches for {key}"       # one batch per (shard, tick)
        assert pts.dtype == np.float64 and pts.shape[1] == DIM
        assert stamp == key[1] - 1                             # the tick's start on the position timeline
        got[key] = pts.tolist()
    assert got == want                                         # grouped by the slot, sorted by slot
    assert c["pos_ticked"] == 8 and c["pos_outside_horizon"] == 2          # slots 9 and 10 are past T
    assert c["pos_ticked"] + c["pos_outside_horizon"] == c["valid"]


def test_emit_empty_ticks_gives_every_shard_and_tick_once(batch):
    outs, c = batch
    sizes = sorted((key, pts.shape) for key, pts in outs["full"])
    counts = {}
    for key, pts, _ in outs["pos"]:
        counts[key] = pts.shape[0]
    assert sizes == [((sh, t), (counts.get((sh, t), 0), DIM)) for sh in range(N_SHARDS) for t in range(1, HORIZON + 1)]


def test_event_time_horizon_and_public_deadline(batch):
    outs, c = batch
    rows = lambda label: sorted((k, pts.tolist()) for k, pts in outs[label])  # noqa: E731
    assert rows("evt_all") == [((0, 1), [[1.0, 0.0]]), ((0, 2), [[2.0, 0.0], [3.0, 0.0]]), ((0, 3), [[4.0, 0.0]])]
    assert rows("evt_late") == [((0, 2), [[2.0, 0.0], [3.0, 0.0]]), ((0, 3), [[4.0, 0.0]])]
    assert (c["all_ticked"], c["all_outside_horizon"], c.get("all_after_deadline", 0)) == (4, 2, 0)
    assert (c["late_ticked"], c["late_outside_horizon"], c["late_after_deadline"]) == (3, 2, 1)
    assert c["late_arrived_after_deadline"] == 3   # telemetry of the stage's wall clock; admission ignores it


def test_no_record_changes_tick_when_another_is_inserted_or_dead_lettered(batch):
    """P2: the tick is a function of the record alone. Every other record keeps
    the tick (and shard) that the clean input gives it; a renumbering or arrival-count clock would not."""
    outs, c = batch
    by = {lab: {tuple(r): key for key, pts in outs[lab] for r in pts.tolist()} for lab in "BD"}
    assert c["Bdead_letter_nan_or_inf"] == 1
    clean_b = {(float(s), float(s * 10)): (s % 3, s // 4 + 1) for s in range(20)}      # slot = line index
    assert by["B"] == {x: k for x, k in clean_b.items() if x != (5.0, 50.0)}
    shard = TickClock(**IND_EVT).shard_of
    clean_d = {(float(i), float(i * 10)): (shard(None, f"m{i}", None, None), int((100.0 + 2.5 * i) // 10) - 10 + 1)
               for i in range(20)}
    assert by["D"].pop((-1.0, -1.0))[1] == 1
    assert by["D"] == clean_d


def test_redelivered_records_are_counted_once_in_batch(batch):
    outs, c = batch
    assert sorted((k, pts.tolist()) for k, pts in outs["dup"]) == REDELIVERY_WANT
    assert c["dup_redeliveries_dropped"] == 3 and c["dup_without_message_id"] == 1
    assert c["dup_read"] == 7 and c["dup_valid"] == 7 and c["dup_ticked"] == 7


# --------------------------------------------------------------------------- streaming

def test_streaming_admits_records_behind_the_watermark_and_fires_on_processing_time():
    """The watermark plays no part: a record whose tick the watermark has long passed is still
    admitted (no deadline set), in its own tick; one outside the horizon is still dropped."""
    def pp(i, ts):
        return _pt(None, ts, f"m{i}", x=[float(i), 0.0])
    stream = (_TestStream()
              .add_elements([pp(1, 100.5)], event_timestamp=100.5)
              .advance_watermark_to(10_000)                           # far beyond every tick
              .add_elements([pp(2, 100.7), pp(3, 101.2), pp(4, 500.0)], event_timestamp=100.7)
              .advance_processing_time(5)
              .add_elements([pp(5, 102.9)], event_timestamp=102.9)
              .advance_processing_time(5)
              .advance_watermark_to_infinity())
    p = _pipeline("BundleBasedDirectRunner", streaming=True)
    out = (p | stream | BatchIntoTicks("event_time", tick_seconds=1.0, t_start=100, horizon_ticks=3)
           | beam.FlatMap(lambda kv: [(kv[0][1], r[0]) for r in kv[1].tolist()]))
    assert_that(out, equal_to([(1, 1.0), (1, 2.0), (2, 3.0), (3, 5.0)]))
    p.run().wait_until_finish()


# --------------------------------------------------------------------------- dedup

@pytest.mark.parametrize("buckets", [None, 1, 3])
def test_redelivered_records_are_counted_once_by_the_stateful_dedup(buckets):
    # the processing-time timer sends this pipeline to the BundleBasedDirectRunner, whose counters
    # undercount after a Flatten of several inputs (measured): only the dedup's own counter is checked
    p = _pipeline()
    pts = (p | beam.Create(_redelivery_inputs())
           | DedupByMessageId(mode="stateful", ttl_seconds=60, label_prefix="st_", key_buckets=buckets)
           | ParsePoints(DIM)).points
    out = pts | BatchIntoTicks(**REDELIVERY_TICKS) | beam.Map(lambda kv: (kv[0], kv[1].tolist()))
    assert_that(out, equal_to(REDELIVERY_WANT))
    result = p.run()
    result.wait_until_finish()
    assert _counters(result)["st_redeliveries_dropped"] == 3


def test_an_empty_pane_merges_to_nothing():
    """A processing-time pane can fire with no partial on a stream: no batch, no crash."""
    assert list(_MergeTickFn(TickClock("position", tick_size=2, horizon_ticks=3)).process(((0, 1), []))) == []


def test_a_reused_message_id_with_another_publish_time_is_not_a_redelivery():
    """A restarted Pub/Sub (the emulator) numbers messages from 1 again: same id, new publish time."""
    from transforms.dedup import _SplitByMessageIdFn
    fn = _SplitByMessageIdFn("")
    fn.setup()
    first = Record('{"x": [1, 2]}', None, 100.0, "7")
    again = Record('{"x": [1, 2]}', None, 100.0, "7")   # a redelivery: same id, same publish time
    reused = Record('{"x": [3, 4]}', None, 250.0, "7")  # a new message with a reused id
    keys = [k for k, _ in (next(iter(fn.process(r))) for r in (first, again, reused))]
    assert keys[0] == keys[1] != keys[2]


def test_the_bucketed_dedup_remembers_each_id_for_its_ttl_and_then_forgets_it():
    """key_buckets: one key holds many ids and one timer at the earliest expiry; an id is remembered
    from first sight until at least ttl later (so a redelivery within the ttl is dropped), then forgotten."""
    from transforms.dedup import _make_bucketed_dedup_fn
    from apache_beam.utils.timestamp import Timestamp as Ts

    class State:
        v = None

        def read(self):
            return self.v

        def write(self, v):
            self.v = dict(v)

        def clear(self):
            self.v = None

    class Timer:
        at = None

        def set(self, ts):
            self.at = ts

    clock = [0.0]
    fn = _make_bucketed_dedup_fn("t")(10.0, "", None, lambda: clock[0])
    fn.setup()
    ids, timer = State(), Timer()

    def see(t, mid):
        clock[0] = t
        return len(list(fn.process((0, (mid, Record("{}", None, None, mid))), ids=ids, expiry=timer)))

    def fire(t):
        clock[0] = t
        list(fn.expire(fired=Ts.of(t), ids=ids, expiry=timer) or ())

    assert see(0, "a") == 1 and timer.at == Ts.of(10)
    assert see(5, "b") == 1 and timer.at == Ts.of(10)  # the earliest expiry stays armed
    assert see(6, "a") == 0 and see(9.9, "b") == 0     # redeliveries within the ttl
    fire(10)
    assert set(ids.v) == {"b"} and timer.at == Ts.of(15)  # a forgotten, b kept until its own expiry
    assert see(11, "a") == 1 and see(12, "b") == 0
    fire(15)
    assert set(ids.v) == {"a"} and timer.at == Ts.of(21)
    fire(21)
    assert ids.v is None  # an empty key holds nothing (the local runner then drops it)
    assert see(22, "b") == 1 and timer.at == Ts.of(32)
