"""A data engineer's own data, without a pipeline: reading rules (columns, delimiters, ISO and
millisecond timestamps, Parquet), the clipped count at float rounding, dimension-aware hints, the
useless-run rule, the plan before data, and scikit-learn habits of DPStreamClusterer."""
from __future__ import annotations

import json
import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from dpstream import DPStreamClusterer
from dpstream.api import _ADVANCED
from dpstream.rings import clip_to_ball

# --------------------------------------------------------------------------- reading rules

parse = pytest.importorskip("transforms.parse", exc_type=ImportError)


def test_a_semicolon_csv_line_is_dead_lettered_with_a_delimiter_hint_and_read_with_the_delimiter():
    _, dead = parse.parse_record("48.85;2.35", 2, "csv")
    assert dead[0]["reason"] == "wrong_dimension" and "--delimiter ';'" in dead[0]["detail"]
    pts, _ = parse.parse_record("48.85;2.35", 2, "csv", text_options=parse.TextOptions(";"))
    assert pts[0].point.tolist() == [48.85, 2.35]
    pts, _ = parse.parse_record("1\t2", 2, "csv", text_options=parse.TextOptions("\t"))
    assert pts[0].point.tolist() == [1.0, 2.0]


def test_csv_columns_skip_a_text_column_and_keep_the_slot():
    opt = parse.TextOptions(columns=(1, 2))
    pts, dead = parse.parse_record(parse.Record("user-17,48.85,2.35", 7), 2, "csv", text_options=opt)
    assert dead == [] and pts[0].point.tolist() == [48.85, 2.35] and pts[0].slot == 7
    _, dead = parse.parse_record(parse.Record("user-17,48.85", 8), 2, "csv", text_options=opt)
    assert dead[0]["reason"] == "wrong_dimension" and dead[0]["slot"] == 8
    _, dead = parse.parse_record("user-17,north,2.35", 2, "csv", text_options=opt)
    assert dead[0]["reason"] == "non_numeric"


def test_json_columns_read_named_keys_or_indexes_of_x():
    pts, _ = parse.parse_record('{"lat": 48.85, "lon": 2.35, "user": "a"}', 2, "json",
                                text_options=parse.TextOptions(columns=("lat", "lon")))
    assert pts[0].point.tolist() == [48.85, 2.35]
    pts, _ = parse.parse_record('{"x": [9, 1, 2]}', 2, "json", text_options=parse.TextOptions(columns=(1, 2)))
    assert pts[0].point.tolist() == [1.0, 2.0]
    _, dead = parse.parse_record('{"lat": 48.85}', 2, "json", text_options=parse.TextOptions(columns=("lat", "lon")))
    assert dead[0]["reason"] == "missing_x" and "'lon'" in dead[0]["detail"]


@pytest.mark.parametrize("ts, want", [("2026-12-01T10:00:00Z", 1796119200.0),
                                      ("2026-12-01T11:00:00+01:00", 1796119200.0),
                                      ("2026-12-01T10:00:00.5Z", 1796119200.5)])
def test_an_iso_8601_ts_string_is_an_event_time(ts, want):
    pts, dead = parse.parse_record(json.dumps({"x": [1, 2], "ts": ts}), 2, "json")
    assert dead == [] and pts[0].ts == want


def test_an_iso_ts_without_a_zone_is_bad_ts_saying_so():
    _, dead = parse.parse_record('{"x": [1, 2], "ts": "2026-12-01T10:00:00"}', 2, "json")
    assert dead[0]["reason"] == "bad_ts" and "time zone" in dead[0]["detail"]


def test_ts_unit_ms_reads_millisecond_timestamps():
    pts, _ = parse.parse_record('{"x": [1, 2], "ts": 1796119200500}', 2, "json",
                                text_options=parse.TextOptions(ts_unit="ms"))
    assert pts[0].ts == 1796119200.5


def test_text_options_refuse_what_cannot_work():
    for bad in (parse.TextOptions("."), parse.TextOptions("ab"), parse.TextOptions(ts_unit="h"),
                parse.TextOptions(columns=(1, "a")), parse.TextOptions(columns=(1, 1))):
        with pytest.raises(ValueError):
            bad.check(2)
    with pytest.raises(ValueError, match="2 columns for dimension 3"):
        parse.TextOptions(columns=(0, 1)).check(3)


def test_parse_columns_and_delimiter_options():
    from pipelines.formats import parse_columns, parse_delimiter
    assert parse_columns("lat, lon") == ("lat", "lon") and parse_columns("1,2") == (1, 2)
    with pytest.raises(ValueError):
        parse_columns("1,lon")
    assert parse_delimiter("\\t") == "\t" and parse_delimiter(";") == ";" and parse_delimiter(None) == ","


def test_parquet_reads_every_numeric_column_or_the_named_ones(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from pipelines.formats import parquet_columns, parquet_rows, read_parquet
    path = str(tmp_path / "e.parquet")
    pq.write_table(pa.table({"id": ["a", "b", "c"], "e0": [0.1, 0.2, None], "e1": np.array([1, 2, 3], np.int32)}),
                   path)
    assert parquet_rows(path) == 3 and parquet_columns(path, None) == ("e0", "e1")
    X = read_parquet(path, ("e1", "e0"))
    assert X.shape == (3, 2) and X[0].tolist() == [1.0, 0.1] and math.isnan(X[2, 1])
    with pytest.raises(ValueError, match="not numeric"):
        parquet_columns(path, ("id", "e0"))
    with pytest.raises(ValueError, match="no column 'zz'"):
        parquet_columns(path, ("zz",))


def test_millisecond_timestamps_get_a_launch_note(tmp_path):
    from pipelines.formats import resolve
    from pipelines.sources import plan_files
    (tmp_path / "ev.jsonl").write_text('{"x": [1, 2], "ts": 1796119200000}\n')
    specs, n, notes = plan_files(str(tmp_path / "ev.jsonl"))
    job = SimpleNamespace(files=specs, notes=notes, columns=None, delimiter=",", dim=2, tick_seconds=10.0,
                          ts_unit="s")
    resolve(job)
    assert any("--ts_unit ms" in x for x in job.notes)


def test_csv_header_names_resolve_to_the_same_indexes_in_every_file(tmp_path):
    from pipelines.formats import resolve
    from pipelines.sources import plan_files
    (tmp_path / "a.csv").write_text("user_id,lat,lon\nu,1,2\n")
    (tmp_path / "b.csv").write_text("user_id,lat,lon\nv,3,4\n")
    specs, n, notes = plan_files(str(tmp_path / "*.csv"), None, True)
    job = SimpleNamespace(files=specs, notes=notes, columns=("lat", "lon"), delimiter=",", dim=2,
                          tick_seconds=None, ts_unit="s")
    resolve(job)
    assert job.csv_columns == (1, 2) and n == 2
    (tmp_path / "c.csv").write_text("lat,lon,user_id\n1,2,w\n")
    specs, n, notes = plan_files(str(tmp_path / "*.csv"), None, True)
    job.files = specs
    with pytest.raises(ValueError, match="other positions"):
        resolve(job)


# --------------------------------------------------------------------------- clipping at float rounding

def test_float32_unit_embeddings_are_not_counted_as_clipped_at_radius_1():
    rng = np.random.default_rng(0)
    E = rng.normal(size=(2000, 384)).astype(np.float32)
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    X = E.astype(np.float64)
    assert (np.linalg.norm(X, axis=1) > 1).mean() > 0.2  # float rounding puts many just outside
    Y, n = clip_to_ball(X, np.zeros(384), 1.0)
    assert n == 0
    assert np.linalg.norm(Y, axis=1).max() <= 1.0  # still projected: the sensitivity bound holds
    _, n = clip_to_ball(X * 1.01, np.zeros(384), 1.0)
    assert n == 2000


def test_the_clip_warning_fits_the_dimension():
    from pipelines.summary import run_warnings
    job = SimpleNamespace(source="files", dead_letter="x", clock="position", total_ticks=1, tick_size=10,
                          center=None, radius=1.0, streaming=False, dim=384, t_start_given=True)
    c = {"read": 10, "valid": 10, "points_processed": 10, "clipped": 9}
    w = " ".join(run_warnings(job, c))
    assert "GPS" not in w and "--radius 1" in w
    job.dim = 2
    assert "GPS" in " ".join(run_warnings(job, c))


# --------------------------------------------------------------------------- useless runs

def test_a_useless_batch_run_has_a_reason_and_a_healthy_one_none():
    from pipelines.exit_codes import useless_reason
    job = SimpleNamespace(streaming=False, max_dead_letter_fraction=0.5)
    assert "nothing was read" in useless_reason(job, {"read": 0, "points_processed": 0})
    assert "clusterer" in useless_reason(job, {"read": 10, "dead_letter": 10, "points_processed": 0})
    assert "max_dead_letter_fraction" in useless_reason(job, {"read": 10, "dead_letter": 6, "points_processed": 4})
    assert useless_reason(job, {"read": 10, "dead_letter": 5, "points_processed": 5}) is None
    job.max_dead_letter_fraction = 0.1
    assert useless_reason(job, {"read": 10, "dead_letter": 2, "points_processed": 8}) is not None
    assert useless_reason(SimpleNamespace(streaming=True), {"read": 0}) is None


# --------------------------------------------------------------------------- the plan before data

def test_plan_only_is_a_function_of_public_parameters_and_needs_no_data():
    m = DPStreamClusterer(10, epsilon=1.0, radius=1.0, horizon_ticks=1000, tick_size=1000)
    text = m.plan(384)
    assert "Total spent: ε = 1.0000" in text and "block size M = " in text and "state bound" in text
    M = int(text.split("block size M = ")[1].split()[0].replace(",", ""))
    assert f"first full block is released at tick {math.ceil(M / 1000)} " in text
    assert m.plan(384) == text and not hasattr(m, "cluster_centers_")
    from dpstream.planning import plan
    p2 = plan(m._config(384, 1000))
    assert p2["block_size"] == M


def _engine_first_flush(cfg, tick_points, seed):
    """The tick of an engine run's first flush, its ticks drawn by ``tick_points(rng)``."""
    from dpstream.engine import Engine
    e = Engine(cfg, b"k" * 32)
    rng = np.random.default_rng(seed)
    t = 0
    while e.last_flush == 0:
        t += 1
        e.step(tick_points(rng))
    return t


def test_the_plan_says_from_which_tick_a_release_holds_points():
    # ticks of 100 points at d = 64, fewer than one of A's leaves needs: the first flush waits for the DP
    # count, and the plan's tick (noise aside) is the engine's within the count's noise
    from dpstream.params import EngineConfig
    from dpstream.planning import plan, plan_text
    cfg = EngineConfig(n_clusters=10, dim=64, radius=16.0, epsilon=1.0)
    p = plan(cfg, 100)
    assert p["first_flush_points"] > 100 and p["first_flush_tick"] == math.ceil(p["first_flush_points"] / 100) > 1
    assert f"about tick {p['first_flush_tick']}," in plan_text(cfg, 100)
    assert abs(_engine_first_flush(cfg, lambda rng: rng.normal(size=(100, 64)), 2) - p["first_flush_tick"]) <= 1
    assert plan(cfg, 1000)["first_flush_tick"] == 1 and "tick 1's release already holds" in plan_text(cfg, 1000)
    assert plan(cfg.with_(first_flush_leaves=0), 100)["first_flush_tick"] == 1


def test_the_plan_s_first_flush_is_the_first_of_its_three_causes():
    # a first flush asked to wait for many leaves comes at the first epoch change (a DP count of the first
    # epoch's blocks) instead: the plan must say that tick, not the far one the wait alone would give
    from dpstream.params import EngineConfig
    from dpstream.planning import plan, plan_text
    cfg = EngineConfig(n_clusters=2, dim=4, radius=10.0, epsilon=1.0, horizon_ticks=400, first_flush_leaves=100.0)
    p = plan(cfg, 100)
    assert math.ceil(p["first_flush_points"] / 100) > 2 * p["first_flush_tick"]
    assert p["first_flush_tick"] == math.ceil(cfg.first_epoch_blocks * p["block_size"] / 100)
    assert f"about tick {p['first_flush_tick']}," in plan_text(cfg, 100)
    tick = _engine_first_flush(cfg, lambda rng: rng.normal(size=(100, 4)) * 0.5 + 3.0, 0)
    assert abs(tick - p["first_flush_tick"]) <= 1


def test_the_planned_state_bound_holds_on_a_stream():
    from dpstream.engine import Engine
    from dpstream.params import EngineConfig
    from dpstream.planning import plan
    cfg = EngineConfig(n_clusters=3, dim=2, radius=10.0, epsilon=1.0, delta=1e-6, horizon_ticks=16)
    bound = plan(cfg)["state_bound_floats"]
    e = Engine(cfg, b"k" * 32)
    rng = np.random.default_rng(1)
    for _ in range(16):
        e.step(rng.normal(size=(500, 2)))
        assert e.state_size() <= bound


# --------------------------------------------------------------------------- scikit-learn habits

def _fitted(**kw):
    X = np.random.default_rng(0).normal(size=(3000, 2)) + np.repeat([[0, 0], [6, 6], [-6, 6]], 1000, axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DPStreamClusterer(3, radius=20.0, random_state=1, **kw).fit(X), X


def test_score_transform_and_labels_after_fit():
    m, X = _fitted()
    assert m.labels_.shape == (3000,) and (m.labels_ == m.predict(X)).all()
    D = m.transform(X[:5])
    assert D.shape == (5, 3) and np.allclose(D.min(axis=1) ** 2, -np.array([m.score(X[i:i + 1]) for i in range(5)]))
    from dpstream.reader import ReleaseModel
    assert m.score(X) == pytest.approx(ReleaseModel(m.release_.to_dict()).score(X))


@pytest.mark.parametrize("name", ["n_clusters", "epsilon", "delta", "radius", "objective", "semicoreset",
                                  "random_state", "tick_size", "horizon_ticks", "neighbouring", "center",
                                  "verbose"] + _ADVANCED)
def test_every_parameter_round_trips_through_set_params_and_clone(name):
    from sklearn.base import clone
    from dpstream.params import EngineConfig
    m = DPStreamClusterer(3, radius=20.0)
    defaults = EngineConfig(n_clusters=3, dim=2, radius=20.0, epsilon=1.0, delta=1e-6, horizon_ticks=8)
    table = {"n_clusters": 4, "epsilon": 2.0, "delta": 1e-7, "radius": 5.0, "objective": "kmedian",
             "semicoreset": "lloyd", "random_state": 7, "tick_size": 50, "horizon_ticks": 9,
             "neighbouring": "add_remove", "center": (1.0, 2.0), "verbose": 1}
    value = table[name] if name in table else getattr(defaults, name)
    m.set_params(**{name: value})
    assert m.get_params()[name] is value or m.get_params()[name] == value
    assert clone(m).get_params()[name] == value
    if name in _ADVANCED:
        assert m.advanced[name] == value  # where the engine's configuration reads it


def test_set_params_of_an_advanced_parameter_reaches_the_engine():
    m = DPStreamClusterer(3, radius=20.0)
    m.set_params(n_rings=5)
    assert m._config(2, 8).n_rings == 5


def test_verbose_fit_prints_what_the_releases_say_and_an_end_to_end_rate(capsys):
    m, _ = _fitted(verbose=1)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert f"tick {m.release_.tick}/3 epoch {m.release_.epoch} run {m.release_.run}" in last
    assert "points/s end to end" in last


# --------------------------------------------------------------------------- CSV lines parsed in blocks

def test_a_block_of_lines_parses_exactly_as_its_lines_one_by_one():
    rng = np.random.default_rng(5)
    pool = [b"1,2", b" 3 , 4\t", b"a,b", b"1e999,1", b"", b"\xef\xbb\xbf7,8", b"1;2", b"9,10", b"1,2,3",
            b"nan,1", b"+.5,-6.", b"1_0,2", b"\xff\xfe", b'{"x": [1, 2]}', b"0x1,2", b"1e5,-2E-3", b"  ",
            repr(float(rng.normal())).encode() + b"," + repr(float(rng.normal())).encode()]
    lines = [pool[i] for i in rng.integers(0, len(pool), 400)]
    for fmt in ("csv", "auto", "json"):
        got_p, got_d = parse.parse_record(parse.Record(parse.Lines(lines), 50), 2, fmt, batch_arrays=True)
        want = {}
        for i, ln in enumerate(lines):
            p, d = parse.parse_record(parse.Record(ln, 50 + i), 2, fmt, batch_arrays=True)
            want[50 + i] = ("p", p[0].point.tobytes()) if p else ("d", d[0]["reason"], d[0]["detail"], d[0]["raw"])
        got = {}
        for p in got_p:
            if isinstance(p, parse.ParsedBatch):
                for row, s in zip(p.points, p.slots):
                    got[int(s)] = ("p", row.tobytes())
            else:
                got[p.slot] = ("p", p.point.tobytes())
        for d in got_d:
            got[d["slot"]] = ("d", d["reason"], d["detail"], d["raw"])
        assert got == want, fmt


def test_the_block_check_of_plain_csv_lines_agrees_with_the_line_regex():
    """plain_csv_block (bytes, fields per line, numpy's conversion, for a whole block) says yes exactly when
    csv_bytes_re matches every line, and gives the values the line-by-line conversion gives; a block with one
    line off the pattern (a field too many or too few, a stray byte, a number numpy and the regex read
    differently) goes line by line."""
    from transforms.parser import plain_csv_block
    from transforms.text_formats import csv_bytes_re
    rng = np.random.default_rng(11)
    odd = [b"", b"x", b"1.2.3", b"e5", b"1e", b"+", b"-.e1", b"\r", b"1 2", b" ", b"\t.5", b"5.", b"1E+07", b"nan"]
    seen = {True: 0, False: 0}
    for _ in range(3000):
        dim, n = int(rng.integers(1, 4)), int(rng.integers(1, 5))
        lines = []
        for _ in range(n):
            fields = [repr(float(v)).encode() for v in rng.normal(size=dim) * 10.0 ** rng.integers(-5, 6)]
            if rng.random() < 0.15:
                fields[int(rng.integers(dim))] = odd[int(rng.integers(len(odd)))]
            if rng.random() < 0.05:
                fields.append(b"1") if rng.random() < 0.5 else fields.pop()
            lines.append(b",".join(fields))
        want = all(csv_bytes_re(dim).match(ln) for ln in lines)
        got = plain_csv_block(lines, dim)
        seen[want] += 1
        assert (got is not None) == want, (lines, dim)
        if want:
            ref = np.array(b",".join(lines).split(b","), dtype=np.float64).reshape(n, dim)
            assert got.tobytes() == ref.tobytes()
    assert min(seen.values()) > 300  # both answers exercised
    assert plain_csv_block(["1,2"], 2) is None and plain_csv_block([], 2) is None  # text lines go line by line


def test_count_lines_is_the_number_and_first_of_split_lines():
    import itertools

    pytest.importorskip("apache_beam", exc_type=ImportError)  # file_bytes reads through Beam's filesystems
    from pipelines.file_bytes import count_lines, split_lines
    for size in range(7):
        for parts in itertools.product((b"a", b"\n", b"\r", b"7,8"), repeat=size):
            data = b"".join(parts)
            lines = split_lines(data)
            assert count_lines(data) == (len(lines), lines[0] if lines else b""), data


# --------------------------------------------------------------------------- pictures and the demo

def test_the_demo_says_no_data_yet_for_a_release_without_data():
    pytest.importorskip("apache_beam", exc_type=ImportError)
    from dpstream.engine import Engine
    from dpstream.params import EngineConfig
    from pipelines.demo_pubsub import centers_text
    e = Engine(EngineConfig(n_clusters=2, dim=2, radius=10.0, epsilon=1.0, delta=1e-6, horizon_ticks=4), b"k" * 32)
    assert centers_text(e.step(np.zeros((0, 2))).to_dict()) == "no data yet"
    rel = e.step(np.random.default_rng(0).normal(size=(5000, 2))).to_dict()
    assert centers_text(rel).count("(") == 2


def test_the_report_plane_is_a_pca_for_any_d_and_a_map_for_gps():
    pytest.importorskip("apache_beam", exc_type=ImportError)
    from pipelines.report import _looks_like_gps, plane
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 384)) * 0.01
    X[:, 100] += rng.choice([-1.0, 1.0], 3000)  # the one direction that separates two clusters
    proj, labels = plane(X)
    P = proj(X)
    assert P.shape == (3000, 2) and "principal component" in labels[0]
    assert abs(np.corrcoef(P[:, 0], X[:, 100])[0, 1]) > 0.99  # the first two coordinates would show noise
    gps = np.array([[48.85, 2.35], [48.80, 2.45]])
    proj, labels = plane(gps, gps=True)
    assert labels == ("longitude", "latitude") and proj(gps)[0].tolist() == [2.35, 48.85]
    job = SimpleNamespace(dim=2, columns=("lat", "lon"), center=None, radius=1.0)
    assert _looks_like_gps(job)
    assert _looks_like_gps(SimpleNamespace(dim=2, columns=None, center=(48.85, 2.35), radius=0.5))
    assert not _looks_like_gps(SimpleNamespace(dim=2, columns=None, center=None, radius=12.0))


def test_columns_on_a_npy_file_is_an_error_not_ignored(tmp_path):
    from pipelines.formats import resolve
    from pipelines.sources import plan_files
    np.save(tmp_path / "x.npy", np.zeros((3, 4)))
    specs, n, notes = plan_files(str(tmp_path / "x.npy"))
    job = SimpleNamespace(files=specs, notes=notes, columns=(0, 1), delimiter=",", dim=2, tick_seconds=None,
                          ts_unit="s")
    with pytest.raises(ValueError, match="--columns applies to CSV, JSON and Parquet"):
        resolve(job)
