"""ParsePoints: every record is a point or a dead letter with a reason, never lost, never fatal."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam transforms cannot run",
                          exc_type=ImportError)

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from apache_beam.metrics.metric import MetricsFilter  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from apache_beam.testing import test_pipeline  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402

from transforms.parse import (  # noqa: E402
    DEAD_LETTER, MAX_RAW_CHARS, REASONS, ParsedPoint, ParsePoints, ParsePointsFn, Record,
    parse_record, records_from_arrays, records_from_lines)

DIM = 3


def _pipeline():
    return test_pipeline.TestPipeline(options=PipelineOptions(["--runner=DirectRunner"]))


def _counters(result, prefix=""):
    out = {}
    for c in result.metrics().query(MetricsFilter().with_namespace("dpstream"))["counters"]:
        name = c.key.metric.name
        if name.startswith(prefix):
            out[name[len(prefix):]] = out.get(name[len(prefix):], 0) + c.committed
    return out


def _run_fn(fn, element):
    """Drive the DoFn's process() directly: (points, dead letters)."""
    pts, dead = [], []
    for o in fn.process(element):
        if isinstance(o, beam.pvalue.TaggedOutput):
            assert o.tag == DEAD_LETTER
            dead.append(o.value)
        else:
            pts.append(o)
    return pts, dead


# --------------------------------------------------------------------------- one reason each

@pytest.mark.parametrize("raw, reason", [
    ("", "empty"),
    ("  \r\n", "empty"),
    (b"\xff\xfe\x00", "not_utf8"),
    ('{"x": [1, 2, 3}', "malformed_json"),
    ("{x: [1, 2, 3]}", "malformed_json"),
    ('{"x": [' + "9" * 5000 + ', 1, 2]}', "malformed_json"),   # beyond Python's int-digit limit
    ("[" * 50_000, "malformed_json"),                              # nesting bomb
    ("[1, 2, 3]", "not_object"),
    ('{"y": [1, 2, 3]}', "missing_x"),
    ('{"x": 5}', "wrong_type"),
    ('{"x": "1,2,3"}', "wrong_type"),
    ('{"x": [1, 2]}', "wrong_dimension"),
    ('{"x": [1, 2, 3, 4]}', "wrong_dimension"),
    ('{"x": [1, "2", 3]}', "non_numeric"),
    ('{"x": [1, true, 3]}', "non_numeric"),
    ('{"x": [1, null, 3]}', "non_numeric"),
    ('{"x": [1, [2], 3]}', "non_numeric"),
    ('{"x": [1, NaN, 3]}', "nan_or_inf"),
    ('{"x": [1, -Infinity, 3]}', "nan_or_inf"),
    ('{"x": [1, 1e999, 3]}', "nan_or_inf"),
    ('{"x": [1, ' + "9" * 400 + ', 3]}', "nan_or_inf"),          # an int too large for float64
    ('{"x": [1, 2, 3], "ts": "yesterday"}', "bad_ts"),
    ('{"x": [1, 2, 3], "ts": Infinity}', "bad_ts"),
    ("1,2", "wrong_dimension"),
    ("1,2,3,", "wrong_dimension"),
    ("1,,3", "non_numeric"),
    ("a,b,c", "non_numeric"),
    ("1,2,0x10", "non_numeric"),
    ("1,2,1_000", "non_numeric"),        # Python's float() would accept it
    ("1,2,\u0663", "non_numeric"),       # an Arabic-Indic digit: float() would accept it too
    ("1,nan,3", "nan_or_inf"),
    ("1,-inf,3", "nan_or_inf"),
    ("1,1e400,3", "nan_or_inf"),
    (np.zeros((2, 2, 3)), "wrong_shape"),
    (np.array(1.0), "wrong_shape"),
    (np.zeros((0, 3)), "empty"),
    (np.zeros(0), "empty"),
    (np.zeros(4), "wrong_dimension"),
    (np.array(["1", "2", "3"]), "non_numeric"),
    (np.array([True, False, True]), "non_numeric"),
    (np.array([1 + 2j, 0, 0]), "non_numeric"),
    (np.array([1.0, np.inf, 0.0]), "nan_or_inf"),
    (12345, "unsupported_type"),
    (None, "unsupported_type"),
    ({"x": [1, 2, 3]}, "unsupported_type"),
])
def test_each_bad_record_has_its_reason_and_keeps_its_slot(raw, reason):
    pts, dead = parse_record(Record(raw, slot=7, ts=5.0, message_id="m"), DIM)
    assert pts == []
    assert len(dead) == 1
    d = dead[0]
    assert d["reason"] == reason, d
    assert d["slot"] == 7 and d["ts"] == 5.0 and d["message_id"] == "m"
    assert set(d) == {"raw", "reason", "detail", "slot", "ts", "message_id"}
    assert isinstance(d["raw"], str) and d["detail"]
    json.dumps(d, allow_nan=False)  # the dead-letter sink writes JSON lines


@pytest.mark.parametrize("rec, reason", [
    (Record("1,2,3", slot=-1), "bad_slot"),
    (Record("1,2,3", slot=1.5), "bad_slot"),
    (Record("1,2,3", slot=True), "bad_slot"),
    (Record("1,2,3", slot=2 ** 62), "bad_slot"),
    (Record("1,2,3", ts=math.nan), "bad_ts"),
    (Record("1,2,3", ts="noon"), "bad_ts"),
])
def test_bad_record_fields_are_dead_lettered(rec, reason):
    pts, dead = parse_record(rec, DIM)
    assert pts == [] and [d["reason"] for d in dead] == [reason]


def test_valid_formats_give_float64_points_with_slot_ts_and_id():
    cases = [
        (Record('{"x": [1, 2.5, -3e2]}', 4, 10.0, "a"), [1, 2.5, -300], 10.0),
        (Record(b'{"x": [1, 2.5, -3e2], "ts": 12.5, "extra": {}}', 4, 10.0, "a"), [1, 2.5, -300], 12.5),
        (Record('{"x": [1, 2.5, -3e2], "ts": null}', 4, 10.0, "a"), [1, 2.5, -300], 10.0),
        (Record("\ufeff 1, 2.5 ,-3e2 \r\n", 4, 10.0, "a"), [1, 2.5, -300], 10.0),
        (Record(np.array([1, 2, 3], dtype=np.int32), 4, 10.0, "a"), [1, 2, 3], 10.0),
        (Record(np.array([1, 2.5, -300], dtype=np.float32), 4, 10.0, "a"), [1, 2.5, -300], 10.0),
    ]
    for rec, want, want_ts in cases:
        pts, dead = parse_record(rec, DIM)
        assert dead == [], (rec, dead)
        (p,) = pts
        assert isinstance(p, ParsedPoint)
        assert p.point.dtype == np.float64 and p.point.shape == (DIM,)
        np.testing.assert_array_equal(p.point, want)
        assert (p.slot, p.ts, p.message_id) == (4, want_ts, "a")
    # carrier timestamps: a Beam Timestamp or an aware datetime (the Pub/Sub publish time) are seconds
    import datetime
    from apache_beam.utils.timestamp import Timestamp
    assert parse_record(Record("1,2,3", ts=Timestamp(micros=5_500_000)), DIM)[0][0].ts == 5.5
    aware = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    assert parse_record(Record("1,2,3", ts=aware), DIM)[0][0].ts == aware.timestamp()
    assert parse_record(Record("1,2,3", ts=aware.replace(tzinfo=None)), DIM)[1][0]["reason"] == "bad_ts"
    # plain inputs: a bare line, and (slot, raw) pairs as enumerate() yields them
    assert parse_record("1,2,3", DIM)[0][0].slot is None
    assert parse_record((9, "1,2,3"), DIM)[0][0].slot == 9
    # an explicit format is not guessed
    assert parse_record("1,2,3", DIM, fmt="json")[1][0]["reason"] == "malformed_json"
    assert parse_record('{"x": [1, 2, 3]}', DIM, fmt="csv")[1][0]["reason"] == "non_numeric"


def test_numpy_batch_rows_get_slot_plus_row_and_bad_rows_keep_theirs():
    batch = np.arange(15, dtype=np.float64).reshape(5, 3)
    batch[1, 2] = np.nan
    batch[3, 0] = -np.inf
    pts, dead = parse_record(Record(batch, slot=100, ts=3.0, message_id="b"), DIM)
    assert [p.slot for p in pts] == [100, 102, 104]          # no renumbering around the bad rows
    assert [(d["slot"], d["reason"]) for d in dead] == [(101, "nan_or_inf"), (103, "nan_or_inf")]
    for p in pts:
        np.testing.assert_array_equal(p.point, batch[p.slot - 100])
        assert p.ts == 3.0 and p.message_id == "b"
    # the parser owns its copy: reusing the caller's buffer does not change emitted points
    batch[0, 0] = 999.0
    assert pts[0].point[0] == 0.0
    # a wrong-width batch: every row dead-lettered with its own slot
    pts, dead = parse_record(Record(np.zeros((4, 2)), slot=10), DIM)
    assert pts == [] and [(d["slot"], d["reason"]) for d in dead] == [(s, "wrong_dimension") for s in range(10, 14)]
    # slots of a bounded numpy input are its row indices
    recs = records_from_arrays([np.zeros((3, 3)), np.zeros(3), np.zeros((2, 3))])
    assert [r.slot for r in recs] == [0, 3, 4]
    assert [r.slot for r in records_from_lines(["a", "b"], start_slot=5)] == [5, 6]


def test_a_batch_of_a_fortran_or_strided_array_is_c_contiguous():
    # later stages hash rows by their bytes and frame arrays as buffers: both need row-major rows
    for arr in (np.asfortranarray(np.arange(12.0).reshape(4, DIM)), np.arange(24.0).reshape(4, 6)[:, ::2]):
        pts, dead = parse_record(Record(arr, slot=0), DIM, "numpy", True)
        assert dead == [] and len(pts) == 1
        assert pts[0].points.flags.c_contiguous
        np.testing.assert_array_equal(pts[0].points, arr)


def test_dead_letter_raw_is_truncated_to_10kb_and_binary_is_a_repr():
    for raw in ["x" * 50_000, "é" * 50_000, b"\x80" * 50_000]:
        (d,) = parse_record(Record(raw, slot=0), DIM)[1]
        assert len(d["raw"].encode("utf-8")) <= MAX_RAW_CHARS
        assert len(d["raw"].encode("utf-8")) > MAX_RAW_CHARS - 100
        assert "truncated" in d["raw"][-60:]
    (d,) = parse_record(Record(np.full((1, 50_000), np.nan), slot=0), DIM)[1]
    assert len(d["raw"].encode("utf-8")) <= MAX_RAW_CHARS and d["raw"].startswith("array([nan")
    (d,) = parse_record(b"\x80abc", DIM)[1]
    assert d["raw"] == repr(b"\x80abc") and d["reason"] == "not_utf8"
    (d,) = parse_record(b"1,2", DIM)[1]
    assert d["raw"] == "1,2"  # UTF-8 bytes are shown as text


def test_fn_never_raises_on_a_hostile_element():
    class Hostile:
        def __repr__(self):
            raise RuntimeError("no")
    fn = ParsePointsFn(DIM)
    pts, dead = _run_fn(fn, Record(Hostile(), slot=3))
    assert pts == [] and dead[0]["reason"] == "unsupported_type" and dead[0]["slot"] == 3
    assert "unrepresentable" in dead[0]["raw"]


def test_bad_configuration_is_refused():
    with pytest.raises(ValueError):
        ParsePoints(0)
    with pytest.raises(ValueError):
        ParsePoints(3, fmt="xml")


# --------------------------------------------------------------------------- fuzz: ≥ 2000 records
#
# Hypothesis draws a "seed" (coordinates of any length with NaN/inf/huge values, a non-number, binary
# garbage, free text, a timestamp) and every seed is turned into 14 records of different kinds, each
# with an oracle verdict: the point's coordinates, a reason, or None (anything but internal_error).
# For a 2-D array the verdict is one such value per row.

_any_float = st.floats(allow_nan=True, allow_infinity=True)
_not_number = st.one_of(st.text(max_size=4), st.booleans(), st.none(), st.lists(st.integers(), max_size=2),
                        st.dictionaries(st.text(max_size=2), st.integers(), max_size=1))
_SEED = st.tuples(
    st.lists(_any_float, max_size=5),                     # coordinates (3 of them one time in ~6)
    st.lists(st.floats(-1e300, 1e300), min_size=DIM, max_size=DIM),  # finite coordinates
    _not_number,
    st.binary(max_size=24),
    st.text(max_size=16),
    st.one_of(st.none(), st.floats(min_value=-1e9, max_value=1e10)),
    st.integers(min_value=309, max_value=4000),            # 10**k overflows float64
)


def _verdict_of(xs):
    if len(xs) != DIM:
        return "wrong_dimension"
    if not all(math.isfinite(v) for v in xs):
        return "nan_or_inf"
    return list(xs)


def _records_of(seed):
    xs, good, junk, blob, text, ts, k = seed
    try:
        blob.decode("utf-8")
        blob_verdict = None
    except UnicodeDecodeError:
        blob_verdict = "not_utf8"
    arr = np.array(xs, dtype=np.float64)
    rows = np.array([good, xs[:DIM] + [1.0] * (DIM - len(xs[:DIM]))], dtype=np.float64)
    return [
        (json.dumps({"x": xs}), _verdict_of(xs) if xs else "wrong_dimension"),
        (",".join(map(repr, xs)), _verdict_of(xs) if xs else "empty"),
        (json.dumps({"x": good, "ts": ts}), list(good)),
        ((",".join(map(repr, good)) + "\n").encode(), list(good)),
        (json.dumps({"x": [junk] + good[1:]}), "non_numeric"),
        (json.dumps({"x": junk}), "wrong_dimension" if isinstance(junk, list) else "wrong_type"),
        (json.dumps({"x": good})[:-2], "malformed_json"),
        (json.dumps({"y": good}), "missing_x"),
        (json.dumps({"x": [10 ** k] + good[1:]}), "nan_or_inf"),
        (arr, "empty" if arr.size == 0 else _verdict_of(xs)),
        (rows, [list(good), _verdict_of(list(rows[1]))]),
        (blob, blob_verdict),
        (text, None),
        (junk, None if isinstance(junk, str) else "unsupported_type"),
    ]


def _check_record(fn, slot, raw, verdict, ts, mid):
    items = raw.shape[0] if isinstance(raw, np.ndarray) and raw.ndim == 2 else 1
    pts, dead = _run_fn(fn, Record(raw, slot, ts, mid))
    # never lost, never duplicated: exactly one output per item, each with its own slot
    assert len(pts) + len(dead) == items
    assert sorted([p.slot for p in pts] + [d["slot"] for d in dead]) == list(range(slot, slot + items))
    for p in pts:
        assert type(p.point) is np.ndarray and p.point.dtype == np.float64 and p.point.shape == (DIM,)
        assert np.isfinite(p.point).all() and p.message_id == mid
    for d in dead:
        assert d["reason"] in REASONS and d["reason"] != "internal_error", d
        assert len(d["raw"].encode("utf-8", "surrogatepass")) <= MAX_RAW_CHARS
        json.dumps(d, allow_nan=False)
    verdicts = verdict if items > 1 or (isinstance(raw, np.ndarray) and raw.ndim == 2) else [verdict]
    by_slot = {p.slot: p for p in pts}
    reason_by_slot = {d["slot"]: d["reason"] for d in dead}
    for i, v in enumerate(verdicts):
        if v is None:
            continue
        if isinstance(v, str):
            assert reason_by_slot.get(slot + i) == v, (raw, v, reason_by_slot)
        else:
            assert slot + i in by_slot, (raw, reason_by_slot)
            np.testing.assert_array_equal(by_slot[slot + i].point, np.asarray(v, dtype=np.float64))
    return len(pts), len(dead), items


def test_fuzz_every_record_is_a_point_or_a_dead_letter():
    fn = ParsePointsFn(DIM)
    totals = {"records": 0, "valid": 0, "dead": 0, "items": 0}

    @settings(max_examples=40, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(_SEED, min_size=4, max_size=4), st.one_of(st.none(), st.text(max_size=6)))
    def run(seeds, mid):
        slot = 0
        for seed in seeds:
            for raw, verdict in _records_of(seed) + [("7" * 20_000, "wrong_dimension")]:
                v, d, n = _check_record(fn, slot, raw, verdict, seed[5], mid)
                totals["valid"] += v
                totals["dead"] += d
                totals["items"] += n
                totals["records"] += 1
                slot += n + 3  # gaps: slots are positions, not counts

    run()
    assert totals["records"] >= 2000, totals
    assert totals["valid"] + totals["dead"] == totals["items"]
    assert totals["valid"] > 300 and totals["dead"] > 1000, totals  # both paths really exercised


# --------------------------------------------------------------------------- on a pipeline

def test_pipeline_outputs_points_and_dead_letters_and_counts_them():
    lines = [
        '{"x": [0, 0, 0]}',              # 0 valid
        "1,1,1",                         # 1 valid
        "oops",                          # 2 wrong_dimension
        '{"x": [3, 3, NaN]}',            # 3 nan_or_inf
        b"\xff\xfe",                     # 4 not_utf8
        "",                              # 5 empty
        '{"x": [6, 6, 6], "ts": 66.0}',  # 6 valid, own ts
        '{"x": [7, 7]',                  # 7 malformed_json
        '{"z": 1}',                      # 8 missing_x
        "9,a,9",                         # 9 non_numeric
    ]
    recs = records_from_lines(lines, ts=1.5)
    batch = np.array([[10, 10, 10], [11, 11, np.inf], [12, 12, 12]], dtype=np.float64)
    recs.append(Record(batch, slot=10, ts=2.5))       # rows 10, 11 (inf), 12
    recs.append(Record("13,13,13", slot=13, ts=3.5))

    p = _pipeline()
    res = p | beam.Create(recs[::-1]) | "Parse" >> ParsePoints(DIM, label_prefix="t_")
    got = res.points | beam.Map(lambda q: (q.slot, tuple(q.point.tolist()), q.ts))
    assert_that(got, equal_to([
        (0, (0.0, 0.0, 0.0), 1.5), (1, (1.0, 1.0, 1.0), 1.5), (6, (6.0, 6.0, 6.0), 66.0),
        (10, (10.0, 10.0, 10.0), 2.5), (12, (12.0, 12.0, 12.0), 2.5), (13, (13.0, 13.0, 13.0), 3.5)]),
        label="points")
    dl = res[DEAD_LETTER] | beam.Map(lambda d: (d["slot"], d["reason"]))
    assert_that(dl, equal_to([(2, "wrong_dimension"), (3, "nan_or_inf"), (4, "not_utf8"), (5, "empty"),
                              (7, "malformed_json"), (8, "missing_x"), (9, "non_numeric"), (11, "nan_or_inf")]),
                label="dead letters")
    result = p.run()
    result.wait_until_finish()
    c = _counters(result, "t_")
    assert c["read"] == 14 and c["valid"] == 6 and c["dead_letter"] == 8
    assert c["read"] == c["valid"] + c["dead_letter"]
    assert c["dead_letter_nan_or_inf"] == 2 and c["dead_letter_not_utf8"] == 1 and c["dead_letter_empty"] == 1
    assert sum(v for k, v in c.items() if k.startswith("dead_letter_")) == c["dead_letter"]


def test_a_line_that_raises_is_its_own_dead_letter_not_its_blocks(monkeypatch):
    """Lines travel in blocks; a line whose parsing raises must cost that line only (one record's
    content never decides the fate of the others in its block)."""
    import transforms.parser as parser_mod
    from transforms.parse import Lines, Record, parse_record

    original = parser_mod._parse_record

    def hostile(element, *a, **k):
        if isinstance(element, Record) and element.raw == b"3,3":
            raise RuntimeError("a hostile line")
        return original(element, *a, **k)

    monkeypatch.setattr(parser_mod, "_parse_record", hostile)
    block = Lines([b"1,1", b"2,2", b"3,3", b"4,4"])
    points, dead = parse_record(Record(block, 10), 2, "csv", batch_arrays=False)
    assert [p.slot for p in points] == [10, 11, 13]
    assert [(d["reason"], d["slot"]) for d in dead] == [("internal_error", 12)]
