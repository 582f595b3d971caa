"""Fuzzing ``ParsePoints`` and the ``DPStreamClusterer`` API (issue "Robustness").

Parsing: every generated element — JSON (valid, malformed, wrong types, huge/NaN/inf values, wrong
dimension, bad "ts"), CSV lines, binary garbage, free text, numpy arrays of any dtype and shape,
other Python objects, wrapped in Records whose slot / ts / message id may be garbage — must end as
exactly ``count_items(raw)`` items, each one valid finite float64 point or one dead letter with a
reason from ``REASONS`` (never ``internal_error``), JSON-serialisable and keeping its slot; never
an exception. Where the right answer is known (generated specs), the verdict is checked too.
``parse_record`` and ``ParsePointsFn.process`` are driven directly (fast); one small DirectRunner
pipeline checks the counters ``read == valid + dead_letter``.

API: ``partial_fit(garbage)`` and garbage constructor parameters raise only ``ValueError`` /
``TypeError`` with a message, and a rejected call leaves the model as it was (usable).

Hypothesis runs derandomized without a database: deterministic for a given code base (it also draws
literal constants from the loaded project modules, so the mix shifts with the set of tests collected;
the assertions leave room for that). Each fuzz test asserts how many records it generated, bounds
that hold whatever is drawn: over 11 000 parsed records in all (see ``MIN_RECORDS``).
"""
from __future__ import annotations

import datetime
import decimal
import fractions
import json
import math
import numbers
import warnings
from collections import Counter

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam", reason="apache_beam is not importable: ParsePoints cannot run",
                           exc_type=ImportError)

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

from apache_beam.metrics.metric import MetricsFilter  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from apache_beam.testing import test_pipeline  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402
from apache_beam.utils.timestamp import Timestamp  # noqa: E402

from dpstream import DPStreamClusterer  # noqa: E402
from transforms.parse import (  # noqa: E402
    DEAD_LETTER, MAX_RAW_CHARS, MAX_SLOT, REASONS, ParsedBatch, ParsedPoint, ParsePoints, ParsePointsFn,
    Record, count_items, parse_record)

DIM = 3
# lower bounds that hold whatever Hypothesis draws (examples × minimum list size × ≥ 9 records per seed)
MIN_RECORDS = {"parse_record": 7500, "process": 3700, "pipeline": 300, "partial_fit": 1000, "constructor": 150}
FUZZ = dict(deadline=None, derandomize=True, database=None, print_blob=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                   HealthCheck.filter_too_much, HealthCheck.large_base_example])


# =========================================================================== generators

_any_float = st.floats(allow_nan=True, allow_infinity=True)
_finite = st.floats(allow_nan=False, allow_infinity=False)
_big_int = st.integers(min_value=-(10 ** 400), max_value=10 ** 400)
_junk_tokens = st.sampled_from(["abc", "0x10", "1_000", "", " ", "\u0663", "1.2.3", "e5", "--1", "1e", "NaNa",
                                "true", "null", "\x00", "\udc80", "1 2", "∞", "+-1", "0b1", "1e5.5"])


def _num_token(v) -> str:
    return repr(float(v)) if isinstance(v, float) else str(v)


@st.composite
def csv_spec(draw):
    """(line, verdict): verdict is the expected reason or the expected coordinates."""
    n = draw(st.one_of(st.just(DIM), st.integers(1, 6)))
    fields, kinds = [], []
    for _ in range(n):
        kind = draw(st.sampled_from(["num", "num", "num", "int", "nonfinite", "junk", "overflow"]))
        if kind == "num":
            fields.append(_num_token(draw(_finite)))
        elif kind == "int":
            fields.append(str(draw(st.integers(-10 ** 20, 10 ** 20))))
        elif kind == "nonfinite":
            fields.append(draw(st.sampled_from(["nan", "-nan", "inf", "-inf", "Infinity", "+INF", "NaN"])))
        elif kind == "overflow":
            fields.append(draw(st.sampled_from(["1e999", "-1e400", "9" * 400, "1" + "0" * 309 + ".5"])))
        else:
            fields.append(draw(_junk_tokens))
        kinds.append(kind)
    pads = st.sampled_from(["", " ", "\t", "  "])
    line = ",".join(draw(pads) + f + draw(pads) for f in fields)
    line = draw(st.sampled_from(["", "\ufeff", " "])) + line + draw(st.sampled_from(["", "\n", "\r\n", " "]))
    if n != DIM:
        verdict = "wrong_dimension"
    elif "junk" in kinds:
        verdict = "non_numeric"
    elif "nonfinite" in kinds or "overflow" in kinds:
        verdict = "nan_or_inf"
    else:
        verdict = [float(f) for f in fields]
    if n == 1 and not line.strip().lstrip("\ufeff").strip():
        verdict = "empty"
    if line.strip().lstrip("\ufeff").strip()[:1] in ("{", "["):
        verdict = None  # read as JSON in auto mode: checked by the invariants only
    return line, verdict


@st.composite
def json_spec(draw):
    """(text, verdict) for JSON records, intact or mutated."""
    scalar = st.one_of(_finite, st.integers(-10 ** 20, 10 ** 20), _any_float, _big_int, st.booleans(), st.none(),
                       st.text(max_size=4), st.lists(st.integers(), max_size=2),
                       st.dictionaries(st.text(max_size=2), st.integers(), max_size=1))
    shape = draw(st.sampled_from(["good", "good", "good", "list", "scalar_x", "missing_x", "not_object"]))
    obj = {}
    if shape == "good":
        xs = draw(st.lists(st.one_of(_finite, st.integers(-10 ** 20, 10 ** 20)), min_size=DIM, max_size=DIM))
        pos = draw(st.integers(0, DIM - 1))
        if draw(st.booleans()):
            xs[pos] = draw(scalar)  # one coordinate of any kind
        obj["x"] = xs
    elif shape == "list":
        obj["x"] = draw(st.lists(scalar, max_size=6))
    elif shape == "scalar_x":
        obj["x"] = draw(scalar.filter(lambda v: not isinstance(v, list)))
    if draw(st.booleans()):
        obj["ts"] = draw(st.one_of(st.none(), _finite, _any_float, st.integers(-10 ** 12, 10 ** 12), _big_int,
                                   st.booleans(), st.text(max_size=3), st.just([1])))
    for key in draw(st.lists(st.sampled_from(["extra", "y", "X", "xx"]), max_size=2, unique=True)):
        obj[key] = draw(scalar)
    if shape == "not_object":
        text = json.dumps(draw(st.sampled_from([[obj], [1, 2, 3], []])))
        return text, "not_object"
    text = json.dumps(obj)  # NaN / Infinity / -Infinity tokens for non-finite floats
    verdict = _json_verdict(obj)
    mutation = draw(st.sampled_from(["none", "none", "none", "truncate", "bom", "garble", "nest"]))
    if mutation == "truncate":
        text = text[:draw(st.integers(1, len(text) - 1))]
        verdict = "malformed_json"
    elif mutation == "bom":
        text = "\ufeff " + text + "\n"
    elif mutation == "garble":
        i = draw(st.integers(1, len(text) - 1))
        text = text[:i] + draw(st.sampled_from(["\x00", "}", "{", "'", '"', ",", "\\", "\udc80"])) + text[i:]
        verdict = None  # usually malformed, sometimes still valid: invariants only
    elif mutation == "nest":
        depth = draw(st.sampled_from([2, 50, 5000, 100_000]))
        text = "[" * depth + text + "]" * depth
        verdict = "malformed_json" if depth > 900 else "not_object"
    return text, verdict


def _json_verdict(obj):
    if "x" not in obj:
        return "missing_x"
    x = obj["x"]
    if not isinstance(x, list):
        return "wrong_type"
    if len(x) != DIM:
        return "wrong_dimension"
    if any(type(v) not in (int, float) for v in x):
        return "non_numeric"
    try:
        vals = [float(v) for v in x]
    except OverflowError:
        return "nan_or_inf"
    if not all(math.isfinite(v) for v in vals):
        return "nan_or_inf"
    if obj.get("ts") is not None:
        ts = obj["ts"]
        if isinstance(ts, str):  # an ISO 8601 time with a zone is a timestamp
            import datetime
            try:
                dt = datetime.datetime.fromisoformat(ts.strip()[:-1] + "+00:00" if ts.strip()[-1:] in "zZ"
                                                     else ts.strip())
                if dt.tzinfo is None:
                    return "bad_ts"
                dt.timestamp()
            except (ValueError, OverflowError, OSError):
                return "bad_ts"
            return vals
        if isinstance(ts, bool) or not isinstance(ts, (int, float)):
            return "bad_ts"
        try:
            if not math.isfinite(float(ts)):
                return "bad_ts"
        except OverflowError:
            return "bad_ts"
    return vals


_dtypes = st.one_of(hnp.integer_dtypes(), hnp.unsigned_integer_dtypes(), hnp.floating_dtypes(sizes=(16, 32, 64)),
                    hnp.complex_number_dtypes(), hnp.boolean_dtypes(), hnp.byte_string_dtypes(max_len=3),
                    hnp.unicode_string_dtypes(max_len=3), hnp.datetime64_dtypes(), hnp.timedelta64_dtypes())
_shapes = st.one_of(st.sampled_from([(DIM,), (1, DIM), (2, DIM), (5, DIM), (DIM + 1,), (4, DIM - 1), (0, DIM),
                                     (0,), (), (3, 0), (2, 2, DIM), (1, 1, 1, DIM)]),
                    hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))


def _special_arrays():
    with np.errstate(over="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)  # np.matrix
        matrix = np.matrix([[1.0, 2.0, 3.0], [np.nan, 0.0, 0.0]])
        huge = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.longdouble) * np.longdouble(10) ** 400
    return [
        huge,                                                   # longdouble beyond float64: nan_or_inf
        np.array([[1.0, 2.0, 3.0]], dtype=np.longdouble),
        np.array([1, "a", None], dtype=object),
        np.array([[1.0, 2.0, 3.0]], dtype=object),
        matrix,
        np.zeros(2, dtype=[("a", "f8"), ("b", "f8"), ("c", "f8")]),
        np.array([np.iinfo(np.uint64).max, 0, 1], dtype=np.uint64),
        np.array([np.iinfo(np.int64).min, -1, 1], dtype=np.int64),
        np.array([65504, -65504, 1], dtype=np.float16),
        np.full((4, DIM), np.finfo(np.float64).max),
        np.array([[np.inf, 0, 0], [0, -np.inf, 0], [0, 0, np.nan], [1, 2, 3]]),
        np.asfortranarray(np.arange(12.0).reshape(4, DIM)),
        np.arange(24.0).reshape(4, 6)[:, ::2],                  # a strided view
        np.array(5.0),
        np.zeros((1, 0)),
    ]


_arrays = st.one_of(
    hnp.arrays(dtype=_dtypes, shape=_shapes),
    hnp.arrays(dtype=hnp.floating_dtypes(sizes=(32, 64)), shape=st.sampled_from([(DIM,), (1, DIM), (6, DIM)])),
    st.sampled_from(_special_arrays()),
)

_other_objects = st.one_of(
    st.none(), st.integers(), _any_float, st.booleans(), st.complex_numbers(),
    st.lists(_any_float, max_size=DIM + 1), st.dictionaries(st.text(max_size=2), _any_float, max_size=2),
    st.sampled_from([{"x": [1, 2, 3]}, (1.0, 2.0, 3.0), {1, 2}, frozenset(), np.float64(1.0), np.int32(3),
                     decimal.Decimal("1.5"), Ellipsis, object(), datetime.date(2020, 1, 1), np.str_("1,2,3"),
                     np.bytes_(b"1,2,3"), bytearray(b"1,2,3"), memoryview(b'{"x": [1, 2, 3]}')]),
)

_raw_spec = st.one_of(
    csv_spec(), csv_spec(), json_spec(), json_spec(), json_spec(),
    csv_spec().map(lambda s: (s[0].encode("utf-8", "surrogatepass"), s[1] if "\udc80" not in s[0] else "not_utf8")),
    json_spec().map(lambda s: (s[0].encode("utf-8", "surrogatepass"), s[1] if "\udc80" not in s[0] else "not_utf8")),
    st.binary(max_size=48).map(lambda b: (b, None)),
    st.text(max_size=32).map(lambda t: (t, None)),
    st.sampled_from(["", " ", "\n", "\ufeff", "\r\n\t "]).map(lambda t: (t, "empty")),
    st.sampled_from(["x" * 50_000, "1," * 30_000, "é" * 20_000, "\x00" * 1000]).map(lambda t: (t, None)),
    _arrays.map(lambda a: (a, "array")),
    _other_objects.map(lambda o: (o, None)),
)

_good_slot = st.integers(0, 10 ** 6)
_bad_slot = st.one_of(st.integers(max_value=-1), st.integers(min_value=MAX_SLOT, max_value=MAX_SLOT + 10),
                      st.sampled_from([True, False, 1.5, math.nan, "3", b"3", np.bool_(True), np.uint64(2 ** 63),
                                       np.float64(2.0), [1], None.__class__]))
_slot = st.one_of(st.none(), _good_slot, _good_slot, _good_slot, _bad_slot,
                  st.integers(MAX_SLOT - 8, MAX_SLOT - 1), st.sampled_from([np.int64(7), np.uint8(3)]))
_aware = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
_ts = st.one_of(st.none(), st.none(), _finite, st.integers(-10 ** 12, 10 ** 12), _any_float, _big_int,
                st.sampled_from([True, "noon", b"1", [1.0], _aware, _aware.replace(tzinfo=None),
                                 Timestamp(micros=5_500_000), datetime.date(2020, 1, 1), np.datetime64("2020-01-01"),
                                 decimal.Decimal("1.5"), fractions.Fraction(10 ** 400, 3), complex(1, 1),
                                 np.float32(1.5), np.bool_(False), np.int64(12)]))
_mid = st.one_of(st.none(), st.text(max_size=8), st.binary(max_size=8), st.integers(), st.just(1.5))


_SEED = st.tuples(_raw_spec, _good_slot, _slot, _ts, _mid)


def expand(seed):
    """One drawn seed → ~10 elements: the raw record under several wrappers, good and bad
    fields; each as (element given to the parser, raw, verdict, slot, ts)."""
    (raw, verdict), good, slot, ts, mid = seed
    text_like = isinstance(raw, (str, bytes, bytearray, memoryview, np.ndarray))
    out = [
        (Record(raw, good, None, mid), raw, verdict, good, None),
        (Record(raw, good, 1.7e9, None), raw, verdict, good, 1.7e9),
        (Record(raw, good, Timestamp(micros=5_500_000), "m"), raw, verdict, good, Timestamp(micros=5_500_000)),
        (Record(raw, slot, ts, mid), raw, verdict, slot, ts),
        (Record(raw, -1, None, mid), raw, verdict, -1, None),                 # bad slot
        (Record(raw, good, math.nan, mid), raw, verdict, good, math.nan),     # bad carrier ts
        ((good, raw), raw, verdict, good, None),                              # what enumerate() yields
        (raw, raw, verdict if text_like else "unsupported_type", None, None),  # bare
        ((raw, good, ts), (raw, good, ts), "unsupported_type", None, None),   # neither a Record nor a pair
    ]
    if isinstance(raw, str):  # the same text as UTF-8 bytes
        b = raw.encode("utf-8", "surrogatepass")
        out.append((Record(b, good, None, mid), b, verdict if "\udc80" not in raw else "not_utf8", good, None))
    elif isinstance(raw, bytes):  # the same bytes as text, when they decode
        try:
            t = raw.decode("utf-8")
        except UnicodeDecodeError:
            t = None
        if t is not None:
            out.append((Record(t, good, None, mid), t, verdict, good, None))
    elif isinstance(raw, np.ndarray) and raw.ndim == 2 and raw.shape[0] >= 1:  # stacked twice
        big = np.concatenate([raw, raw])
        out.append((Record(big, good, None, mid), big, "array", good, None))
    return out


# =========================================================================== oracles and invariants

def _raw_of(el):
    if isinstance(el, Record):
        return el.raw
    if isinstance(el, (str, bytes, bytearray, memoryview, np.ndarray)):
        return el
    if isinstance(el, tuple) and len(el) == 2 and isinstance(el[0], numbers.Integral) and not isinstance(el[0], bool):
        return el[1]
    return el


def _slot_ok(slot):
    if slot is None:
        return True
    return (isinstance(slot, numbers.Integral) and not isinstance(slot, (bool, np.bool_))
            and 0 <= int(slot) < MAX_SLOT)


def _ts_verdict(ts):
    """True / False when the carrier ts is obviously good / bad, None when unsure."""
    if ts is None or isinstance(ts, Timestamp):
        return True
    if isinstance(ts, (bool, np.bool_, str, bytes, list, complex, datetime.date)) and not isinstance(
            ts, datetime.datetime):
        return False
    if isinstance(ts, datetime.datetime):
        return ts.tzinfo is not None
    if type(ts) in (int, float):
        try:
            return math.isfinite(float(ts))
        except OverflowError:
            return False
    return None


def _array_verdicts(arr, slot):
    if arr.ndim not in (1, 2):
        return ["wrong_shape"]
    if arr.size == 0 and (arr.ndim == 1 or arr.shape[0] == 0):
        return ["empty"]
    rows = arr.reshape(1, -1) if arr.ndim == 1 else arr
    m = rows.shape[0]
    if slot is not None and int(slot) + m > MAX_SLOT:
        return ["bad_slot"] * m
    if rows.shape[1] != DIM:
        return ["wrong_dimension"] * m
    if arr.dtype.kind not in "iuf":
        return ["non_numeric"] * m
    with np.errstate(over="ignore", invalid="ignore"):
        f = np.array(rows, dtype=np.float64)
    return [list(r) if np.isfinite(r).all() else "nan_or_inf" for r in f]


def _expected(el, raw, verdict, slot, ts, fmt):
    """Per-item verdicts (a reason or coordinates), or None when only the invariants apply."""
    n = count_items(raw)
    if not _slot_ok(slot):
        return ["bad_slot"] * n
    tv = _ts_verdict(ts)
    if tv is False:
        return ["bad_ts"] * n
    if tv is None:
        return None
    if verdict == "unsupported_type" or not isinstance(raw, (str, bytes, bytearray, memoryview, np.ndarray)):
        return ["unsupported_type"] * n
    if isinstance(raw, np.ndarray):
        if fmt not in ("auto", "numpy"):
            return ["unsupported_type"] * n
        return _array_verdicts(raw, None if slot is None else int(slot))
    if verdict is None or fmt != "auto":
        return None
    return [verdict]


def _items(points):
    """(slot, coordinates) of every valid item, ParsedBatch rows included."""
    out = []
    for p in points:
        if isinstance(p, ParsedBatch):
            assert type(p.points) is np.ndarray and p.points.dtype == np.float64
            assert p.points.ndim == 2 and p.points.shape[1] == DIM and p.points.shape[0] >= 1
            assert p.points.flags.c_contiguous and np.isfinite(p.points).all()
            assert p.slots.dtype == np.int64 and p.slots.shape == (p.points.shape[0],)
            assert p.ts is None or (type(p.ts) is float and math.isfinite(p.ts))
            assert p.message_id is None or isinstance(p.message_id, str)
            out.extend((None if s < 0 else int(s), list(r)) for s, r in zip(p.slots, p.points))
        else:
            assert isinstance(p, ParsedPoint), type(p)
            assert type(p.point) is np.ndarray and p.point.dtype == np.float64 and p.point.shape == (DIM,)
            assert np.isfinite(p.point).all()
            assert p.ts is None or (type(p.ts) is float and math.isfinite(p.ts))
            assert p.message_id is None or isinstance(p.message_id, str)
            out.append((p.slot, list(p.point)))
    return out


def _check_dead(d):
    assert set(d) == {"raw", "reason", "detail", "slot", "ts", "message_id"}, d
    assert d["reason"] in REASONS and d["reason"] != "internal_error", d
    assert isinstance(d["raw"], str) and len(d["raw"].encode("utf-8", "surrogatepass")) <= MAX_RAW_CHARS
    assert isinstance(d["detail"], str) and d["detail"]
    assert d["slot"] is None or (type(d["slot"]) is int and 0 <= d["slot"] < MAX_SLOT + 2 ** 20)
    assert d["ts"] is None or (type(d["ts"]) is float and math.isfinite(d["ts"]))
    assert d["message_id"] is None or isinstance(d["message_id"], str)
    json.dumps(d, allow_nan=False)  # what the dead-letter sink writes


def check_outputs(el, raw, verdict, slot, ts, fmt, points, dead):
    """Every invariant of the module docstring, and the verdict where it is known.
    Returns (number of items, whether a verdict was checked)."""
    n = count_items(raw)
    items = _items(points)
    for d in dead:
        _check_dead(d)
    assert len(items) + len(dead) == n, (len(items), len(dead), n)
    slots = [i[0] for i in items] + [d["slot"] for d in dead]
    if slot is None or not _slot_ok(slot):
        assert slots == [None] * n, slots
    else:  # every item keeps its own slot: the record's slot plus its row
        assert sorted(slots) == list(range(int(slot), int(slot) + n)), (slots, slot)
    want = _expected(el, raw, verdict, slot, ts, fmt)
    if want is not None:
        if slot is not None and _slot_ok(slot) and n > 1:
            by_slot = {i[0]: i[1] for i in items}
            by_slot.update({d["slot"]: d["reason"] for d in dead})
            got = [by_slot[int(slot) + i] for i in range(n)]
        elif n == 1:
            got = [items[0][1] if items else dead[0]["reason"]]
        else:  # several items without slots: compare as multisets, in order within each kind
            got_r = [d["reason"] for d in dead]
            assert got_r == [w for w in want if isinstance(w, str)], (got_r, want)
            assert [i[1] for i in items] == [w for w in want if not isinstance(w, str)]
            return n, True
        assert len(got) == len(want)
        for g, w in zip(got, want):
            if isinstance(w, str):
                assert g == w, (raw if not isinstance(raw, str) else raw[:200], g, w)
            else:
                assert not isinstance(g, str), (raw if not isinstance(raw, str) else raw[:200], g, w)
                np.testing.assert_array_equal(np.asarray(g), np.asarray(w, dtype=np.float64))
    return n, want is not None


# =========================================================================== parse_record

def test_fuzz_parse_record_every_item_is_one_point_or_one_dead_letter():
    totals = Counter()

    @settings(max_examples=120, **FUZZ)
    @given(st.lists(_SEED, min_size=7, max_size=10), st.sampled_from(["auto"] * 6 + ["json", "csv", "numpy"]))
    def run(seeds, fmt):
        for seed in seeds:
            for el, raw, verdict, slot, ts in expand(seed):
                batch = totals["records"] % 2 == 1
                points, dead = parse_record(el, DIM, fmt, batch)
                n, checked = check_outputs(el, raw, verdict, slot, ts, fmt, points, dead)
                totals["verdict checked"] += checked
                if not batch:
                    assert not any(isinstance(p, ParsedBatch) for p in points)
                # the batched form holds the same items as the per-row form
                other_p, other_d = parse_record(el, DIM, fmt, not batch)
                assert sorted(map(str, _items(points))) == sorted(map(str, _items(other_p)))
                assert [d["reason"] for d in dead] == [d["reason"] for d in other_d]
                totals["records"] += 1
                totals["items"] += n
                totals["valid"] += n - len(dead)
                totals["dead"] += len(dead)
                for d in dead:
                    totals[d["reason"]] += 1

    run()
    print(f"parse_record fuzz: {dict(totals)}")
    assert totals["records"] >= MIN_RECORDS["parse_record"], totals
    assert totals["verdict checked"] > totals["records"] // 3, totals
    # both outcomes and most reasons really exercised (Hypothesis' choices shift with the constants of the
    # loaded modules, so the mix depends on which tests run; tests/beam/test_parse.py has one of each reason)
    assert totals["valid"] > 200 and totals["dead"] > 2000, totals
    assert sum(totals[r] > 0 for r in REASONS) >= 10, totals
    assert totals["internal_error"] == 0


# =========================================================================== the DoFn

class _Hostile:
    """An object whose every conversion raises."""

    def __repr__(self):
        raise RuntimeError("hostile repr")

    __str__ = __repr__

    def __float__(self):
        raise RuntimeError("hostile float")

    def __len__(self):
        raise RuntimeError("hostile len")


class _HostileFloat(float):
    def __float__(self):
        raise RuntimeError("hostile float")


class _HostileStr(str):
    def strip(self, *a):
        raise RuntimeError("hostile strip")


from tests.beam.test_parse import _run_fn  # noqa: E402  (drives ParsePointsFn.process directly)


def test_fuzz_parse_points_fn_process_never_raises_and_loses_nothing():
    fns = {"plain": ParsePointsFn(DIM), "batch": ParsePointsFn(DIM, batch_arrays=True),
           "csv": ParsePointsFn(DIM, fmt="csv"), "json": ParsePointsFn(DIM, fmt="json")}
    totals = Counter()

    @settings(max_examples=60, **FUZZ)
    @given(st.lists(_SEED, min_size=7, max_size=10), st.sampled_from(["plain", "plain", "batch", "csv", "json"]))
    def run(seeds, which):
        fn = fns[which]
        for seed in seeds:
            for el, raw, verdict, slot, ts in expand(seed):
                points, dead = _run_fn(fn, el)
                n, checked = check_outputs(el, raw, verdict, slot, ts, fn.fmt, points, dead)
                totals["items"] += n
                totals["verdict checked"] += checked
                totals["records"] += 1

    run()
    print(f"ParsePointsFn.process fuzz: {dict(totals)}")
    assert totals["records"] >= MIN_RECORDS["process"], totals


@pytest.mark.parametrize("el", [
    Record(_Hostile(), 3),
    Record("1,2,3", 3, message_id=_Hostile()),
    Record("1,2,3", 3, ts=_Hostile()),
    Record("1,2,3", 3, ts=_HostileFloat(1.0)),
    Record(_HostileStr("1,2,3"), 3),
    Record(np.zeros((4, DIM)), _Hostile()),
    _Hostile(),
])
def test_hostile_objects_still_end_as_one_dead_letter_per_item(el):
    raw = _raw_of(el)
    points, dead = _run_fn(ParsePointsFn(DIM), el)
    assert points == [] and len(dead) == count_items(raw)
    assert all(d["reason"] in ("unsupported_type", "bad_slot", "bad_ts", "internal_error") for d in dead)
    if isinstance(el, Record) and _slot_ok(el.slot) and el.slot is not None:  # the slot is kept
        assert [d["slot"] for d in dead] == list(range(el.slot, el.slot + len(dead)))
    json.dumps(dead, allow_nan=False)


@pytest.mark.parametrize("el", [
    Record("1,2,3", 3, message_id=_Hostile()),
    Record("1,2,3", 3, ts=_HostileFloat(1.0)),
    Record(_HostileStr("1,2,3"), 3),
])
def test_parse_record_never_raises_even_on_hostile_fields(el):
    """Found by fuzzing: a field whose own conversion raises used to escape parse_record."""
    points, dead = parse_record(el, DIM)
    assert points == [] and [(d["reason"], d["slot"]) for d in dead] == [("internal_error", 3)]
    json.dumps(dead, allow_nan=False)


# =========================================================================== one small pipeline

def _rng_records(rng, n):
    """n picklable garbage-or-good records from a seeded generator (the pipeline's input)."""
    out, slot = [], 0
    junk = ["", "  ", "oops", '{"x": [1, 2', '{"y": 1}', '[1, 2, 3]', '{"x": "1,2,3"}', '{"x": [1, true, 3]}',
            '{"x": [1, NaN, 3]}', '{"x": [1, 2, 3], "ts": "noon"}', "1,2", "1,,3", "1,inf,3", "9" * 400 + ",1,2",
            "[" * 5000, "\ufeff1,2,3\r\n", "a,b,c"]
    for _ in range(n):
        kind = rng.integers(0, 9)
        ts = [None, float(rng.uniform(0, 1e9)), math.nan, "noon"][rng.integers(0, 4)] if rng.random() < 0.3 else None
        s = slot if rng.random() > 0.05 else [-1, 2 ** 62, 1.5, True][rng.integers(0, 4)]
        if kind == 0:
            raw = ",".join(repr(float(v)) for v in rng.normal(size=DIM) * 10.0 ** int(rng.integers(-5, 300)))
        elif kind == 1:
            raw = json.dumps({"x": (rng.normal(size=rng.integers(DIM - 1, DIM + 2)) * 1e3).tolist(),
                              "ts": float(rng.uniform(0, 1e9))})
        elif kind == 2:
            raw = rng.bytes(int(rng.integers(0, 40)))
        elif kind == 3:
            raw = str(junk[rng.integers(0, len(junk))])
        elif kind == 4:
            a = rng.normal(size=(int(rng.integers(1, 8)), DIM))
            a[rng.random(a.shape) < 0.1] = [np.nan, np.inf, -np.inf][rng.integers(0, 3)]
            raw = a.astype([np.float64, np.float32, np.float16][rng.integers(0, 3)])
        elif kind == 5:
            raw = rng.integers(-1000, 1000, size=[(DIM,), (2, DIM), (DIM + 1,), (2, 2, DIM), (0, DIM)][
                rng.integers(0, 5)]).astype([np.int8, np.int64, np.uint16][rng.integers(0, 3)])
        elif kind == 6:
            raw = np.array([["1", "2", "3"]]) if rng.random() < 0.5 else np.ones((2, DIM), dtype=bool)
        elif kind == 7:
            raw = [None, 12345, 1.5, ["1", "2", "3"]][rng.integers(0, 4)]
        else:
            raw = (",".join(repr(float(v)) for v in rng.normal(size=DIM)) + "\n").encode()
        out.append(Record(raw, s, ts, f"m{len(out)}" if rng.random() < 0.5 else None))
        slot += count_items(raw) + int(rng.integers(0, 3))
    return out


def _counters(result, prefix):
    out = Counter()
    for c in result.metrics().query(MetricsFilter().with_namespace("dpstream"))["counters"]:
        name = c.key.metric.name
        if name.startswith(prefix):
            out[name[len(prefix):]] += c.committed
    return out


def test_pipeline_counters_over_fuzzed_records_read_equals_valid_plus_dead_letter():
    recs = _rng_records(np.random.default_rng(2026), 400)
    want_valid = want_dead = 0
    want_reasons = Counter()
    for r in recs:
        p, d = parse_record(r, DIM)
        want_valid += len(p)
        want_dead += len(d)
        want_reasons.update(x["reason"] for x in d)
    n_items = sum(count_items(r.raw) for r in recs)
    assert want_valid + want_dead == n_items and want_valid > 50 and want_dead > 100
    assert len(recs) >= MIN_RECORDS["pipeline"]
    print(f"pipeline fuzz: {len(recs)} records, {n_items} items, {want_valid} valid, {dict(want_reasons)}")

    p = test_pipeline.TestPipeline(options=PipelineOptions(["--runner=DirectRunner"]))
    res = p | beam.Create(recs) | "Parse" >> ParsePoints(DIM, label_prefix="fuzz_")
    assert_that(res.points | "CountPoints" >> beam.combiners.Count.Globally(), equal_to([want_valid]),
                label="points")
    assert_that(res[DEAD_LETTER] | "Reasons" >> beam.Map(lambda d: d["reason"])
                | "CountDead" >> beam.combiners.Count.PerElement(),
                equal_to(list(want_reasons.items())), label="dead letters")
    result = p.run()
    result.wait_until_finish()
    c = _counters(result, "fuzz_")
    assert c["read"] == n_items
    assert c["read"] == c["valid"] + c["dead_letter"]
    assert c["valid"] == want_valid and c["dead_letter"] == want_dead
    assert c["dead_letter_internal_error"] == 0
    assert sum(v for k, v in c.items() if k.startswith("dead_letter_")) == c["dead_letter"]
    for reason, k in want_reasons.items():
        assert c["dead_letter_" + reason] == k


# =========================================================================== the API

SMALL = dict(grid_levels=3, n_rings=6, block_size=100, tree_depth=4)
RADIUS = 10.0


def _model(**kw):
    return DPStreamClusterer(**{**dict(n_clusters=3, epsilon=1.0, radius=RADIUS, random_state=0, tick_size=50,
                                       horizon_ticks=100_000), **SMALL, **kw})


class _BadArray:
    def __array__(self, *a, **k):
        raise RuntimeError("no array for you")


class _BadSeq:
    def __len__(self):
        raise ZeroDivisionError

    def __getitem__(self, i):
        raise KeyError(i)


_garbage_X = st.one_of(
    hnp.arrays(dtype=_dtypes, shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)),
    hnp.arrays(dtype=hnp.floating_dtypes(sizes=(16, 32, 64)), shape=st.tuples(st.integers(0, 6), st.integers(1, 4))),
    hnp.arrays(dtype=np.float64, shape=st.tuples(st.integers(0, 6), st.just(2)),
               elements=st.floats(-1e308, 1e308)),                          # valid, huge values
    st.lists(st.lists(st.one_of(_any_float, st.integers(-10 ** 30, 10 ** 30), st.booleans(), st.none(),
                                st.text(max_size=2)), min_size=0, max_size=3), max_size=4),
    st.lists(_finite, max_size=3),
    st.sampled_from([None, 3.0, "abc", b"ab", {1: 2}, [], [[]], [[1.0, 2.0], [3.0]], _BadArray(), _BadSeq(),
                     (x for x in [1.0]), np.array([[1, 2]], dtype="m8[s]"), np.array([["2020-01-01"] * 2], "M8[D]"),
                     np.zeros((1, 2), dtype=[("a", "f8")]), np.ma.masked_array([[1.0, 2.0]], mask=[[1, 0]]),
                     np.array([[1, 2]], dtype=np.longdouble) * np.longdouble(10) ** 400,
                     np.array([[2 ** 64 - 1, 0]], dtype=np.uint64), _special_arrays()[4][:1, :2],
                     np.asfortranarray(np.ones((3, 2))), np.ones((4, 4))[:, ::2]]),
)


def _centers_ok(m):
    c = m.cluster_centers_
    assert c.shape == (3, m.n_features_in_) and np.isfinite(c).all()
    # in the ball up to A's noise: released centers are not clipped to it (measured up to 1.025 Λ)
    assert np.all(np.linalg.norm(c, axis=1) <= 1.5 * RADIUS)


def test_fuzz_partial_fit_garbage_raises_value_or_type_error_and_leaves_the_model_usable():
    calls = Counter()
    box = {"m": _model()}

    @settings(max_examples=220, **FUZZ)
    @given(st.lists(_garbage_X, min_size=5, max_size=8), st.integers(0, 9))
    def run(xs, fresh):
        if fresh == 0:  # now and then start from a model that has seen nothing
            box["m"] = _model()
        m = box["m"]
        for X in xs:
            before = (getattr(m, "n_ticks_", 0), getattr(m, "release_", None), getattr(m, "n_features_in_", None),
                      m.state_size())
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # overflow warnings of huge finite values
                    m.partial_fit(X)
            except (ValueError, TypeError) as e:
                assert str(e).strip(), repr(e)
                after = (getattr(m, "n_ticks_", 0), getattr(m, "release_", None),
                         getattr(m, "n_features_in_", None), m.state_size())
                assert after[0] == before[0] and after[1] is before[1] and after[2] == before[2]
                assert after[3] == before[3]
                calls["rejected"] += 1
            else:
                assert m.n_ticks_ == before[0] + 1
                _centers_ok(m)
                calls["accepted"] += 1
            calls["calls"] += 1
        # still usable: a valid tick and a prediction
        d = getattr(m, "n_features_in_", 2)
        m.partial_fit(np.random.default_rng(len(xs)).normal(size=(20, d)))
        assert m.predict(np.zeros((2, d))).shape == (2,)
        _centers_ok(m)

    run()
    print(f"partial_fit fuzz: {dict(calls)}")
    assert calls["calls"] >= MIN_RECORDS["partial_fit"], calls
    assert calls["accepted"] > 50 and calls["rejected"] > 200, calls


# constructor parameters: a valid configuration (random values), then at most two parameters replaced by
# garbage of every type
_garbage_common = st.sampled_from([None, "3", b"3", [3], (3,), {}, True, False, -1, 0, -0.5, 1.5, math.nan,
                                   -math.inf, math.inf, 2 ** 70, -(2 ** 70), 1e300, 5e-324, -5e-324,
                                   complex(1, 1), object(), np.float64(2.0), np.int64(2), decimal.Decimal("2"),
                                   np.array([1.0, 2.0]), "kmeans", "tree", "replace_one"])

_VALID = {
    # a few values only: each new (ε, δ) pays a noise calibration (seconds for a large δ)
    "epsilon": st.sampled_from([0.05, 0.5, 1.0, 4.0, 1e3, math.inf]),
    "delta": st.sampled_from([0.0, 1e-12, 1e-6, 0.01]),
    "objective": st.sampled_from(["kmeans", "kmedian"]),
    "semicoreset": st.sampled_from(["tree", "lloyd", "snap"]),
    "random_state": st.one_of(st.none(), st.integers(-10, 10 ** 30), st.binary(min_size=16, max_size=40)),
    "tick_size": st.integers(1, 100),
    "horizon_ticks": st.one_of(st.none(), st.integers(1, 64), st.just(2 ** 40)),
    "neighbouring": st.sampled_from(["replace_one", "add_remove"]),
    "grid_levels": st.integers(1, 3), "n_rings": st.integers(1, 6), "block_size": st.integers(1, 300),
    "tree_depth": st.integers(1, 4), "n_trees": st.integers(1, 2), "n_reps": st.integers(1, 2),
    "n_buckets": st.one_of(st.none(), st.integers(1, 20)), "coreset_size": st.one_of(st.none(), st.integers(4, 60)),
    "lloyd_iters": st.integers(1, 2), "n_init": st.integers(1, 2),
    "hh_alpha": st.floats(0.5, 1.0, exclude_min=True, exclude_max=True), "hh_min_count": st.floats(0, 10),
    "count_share": st.one_of(st.floats(0, 1, exclude_min=True), st.just(1.0)),
    "weight_beta": st.floats(0, 1, exclude_min=True, exclude_max=True),
    "tree_keep_factor": st.floats(1e-3, 10), "tree_branch_factor": st.floats(1e-3, 10),
    "sum_grid_bits": st.integers(4, 40),
    "privacy_split": st.tuples(st.floats(0.01, 1), st.floats(0.01, 1), st.floats(0.01, 1)),
    "epoch_schedule": st.sampled_from(["doubling", "every"]),
    "ring_centers": st.sampled_from(["bicriteria", "bicriteria+released"]),
    "bicriteria": st.booleans(),
    "verbose": st.integers(0, 2),
}
_GARBAGE = dict.fromkeys(list(_VALID) + ["n_clusters", "radius", "center", "not_a_parameter"], _garbage_common)
_GARBAGE.update({
    "epsilon": st.one_of(_garbage_common, st.floats(-1e300, 1e-200), st.just(1e300)),
    "delta": st.one_of(_garbage_common, st.floats(-1, 2), st.just(1.0)),
    "radius": st.one_of(_garbage_common, st.floats(-1e300, 0), st.just(1e308), st.just(1e-300)),
    "center": st.one_of(_garbage_common, st.lists(_any_float, max_size=3),
                        st.sampled_from(["ab", [[1.0, 2.0]], [1e308, -1e308], np.array([1, 2], dtype=object)])),
    "privacy_split": st.one_of(_garbage_common, st.lists(st.floats(-1, 2), max_size=4), st.just("abc"),
                               st.just((0.0, 1.0, 1.0)), st.just((1.0, 0.0, 1.0))),
    "horizon_ticks": st.one_of(_garbage_common, st.just(2 ** 40 + 1)),
    "n_buckets": st.one_of(_garbage_common, st.just(10 ** 30)),
})


@st.composite
def constructor_kwargs(draw):
    kw = {"n_clusters": draw(st.integers(1, 4)), "radius": draw(st.floats(1e-3, 1e6))}
    kw.update(draw(st.fixed_dictionaries({}, optional=_VALID)))
    if draw(st.booleans()):
        d = draw(st.integers(1, 3))
        kw["center"] = draw(st.lists(st.floats(-1e6, 1e6), min_size=d, max_size=d))
    for name in draw(st.lists(st.sampled_from(sorted(_GARBAGE)), max_size=2, unique=True)):
        kw[name] = draw(_GARBAGE[name])
    return kw


_INT_FIELDS = {"n_clusters", "horizon_ticks", "grid_levels", "n_rings", "block_size", "tree_depth", "n_trees",
               "n_reps", "n_buckets", "coreset_size", "lloyd_iters", "n_init", "sum_grid_bits"}


def _unbounded_size(kw) -> bool:
    """Sizes the configuration does not bound (reported): a loop of that length (n_trees in ShiftedGrids,
    lloyd_iters, n_init) or arrays of that size (n_reps, n_buckets) — a hang or a MemoryError rather than
    a ValueError. Left out of the fuzz."""
    for name in ("n_trees", "n_reps", "n_buckets", "lloyd_iters", "n_init"):
        v = kw.get(name)
        if isinstance(v, numbers.Integral) and not isinstance(v, bool) and v > 10 ** 6:
            return True
    return False


def test_fuzz_constructor_parameters_raise_value_or_type_error_only():
    calls = Counter()

    @settings(max_examples=250, **FUZZ)
    @given(constructor_kwargs())
    def run(kw):
        if _unbounded_size(kw):
            return
        calls["configs"] += 1
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m = DPStreamClusterer(**kw)
        except (ValueError, TypeError) as e:
            assert str(e).strip(), repr(e)
            calls["rejected at construction"] += 1
            return
        d = 2
        if kw.get("center") is not None:
            d = max(1, len(np.atleast_1d(kw["center"])))
        X = np.random.default_rng(0).normal(size=(30, d))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m.partial_fit(X)
        except (ValueError, TypeError) as e:
            assert str(e).strip(), repr(e)
            calls["rejected at the first tick"] += 1
            assert getattr(m, "_engine", None) is None  # nothing was started
            return
        calls["accepted"] += 1
        assert m.n_ticks_ == 1 and m.cluster_centers_.shape == (m.n_clusters, d)
        assert np.isfinite(m.cluster_centers_).all()

    run()
    print(f"constructor fuzz: {dict(calls)}")
    assert calls["configs"] >= MIN_RECORDS["constructor"], calls
    assert calls["accepted"] > 40 and calls["rejected at construction"] > 30, calls


@pytest.mark.parametrize("kw", [
    dict(n_clusters=math.inf), dict(horizon_ticks=math.inf), dict(block_size=math.inf), dict(n_buckets=math.inf),
    dict(coreset_size=math.inf), dict(tree_depth=math.inf), dict(n_init=math.inf), dict(n_rings=-math.inf),
    dict(radius=5e-324), dict(radius=1e308), dict(epsilon=5e-324), dict(privacy_split=(math.inf, 1.0, 1.0)),
    dict(count_share=1.0), dict(count_share=1.0, semicoreset="lloyd"), dict(count_share=1.0, delta=0.0),
], ids=lambda kw: ",".join(f"{k}={v!r}" for k, v in kw.items()))
def test_extreme_parameters_raise_value_error_not_overflow_or_zero_division(kw):
    """Found by the fuzz above (OverflowError, ZeroDivisionError, or a ValueError from deep inside)."""
    with pytest.raises(ValueError, match=r"must|needs"):
        DPStreamClusterer(**{**dict(n_clusters=3, epsilon=1.0, radius=10.0, random_state=0), **kw}).partial_fit(
            np.ones((5, 2)))
