"""The job as a new user meets it: the end-of-run summary and its warnings, one-line errors,
the clock options, formats, CSV headers, the report, progress lines, and Beam's own warnings.

Every test runs the real job (``pipelines.dp_stream_cluster.main`` or ``run``) on a small file in a tmp dir."""
from __future__ import annotations

import json
import time
import logging
import os

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                          exc_type=ImportError)

from pipelines import dp_stream_cluster as job_mod  # noqa: E402
from pipelines.job import cli as job_cli  # noqa: E402  (main's launch, patched)


@pytest.fixture
def seed_file(tmp_path):
    p = tmp_path / "seed"
    p.write_bytes(os.urandom(32).hex().encode())
    return str(p)


def _fresh_seed(tmp_path, name="seed-extra"):
    """Another seed: the job refuses a seed already used on another run (the seed registry)."""
    p = tmp_path / name
    p.write_bytes(os.urandom(32).hex().encode())
    return str(p)


def _blobs(n, seed=0, d=2):
    rng = np.random.default_rng(seed)
    means = np.array([[-5.0, -5.0], [5.0, 5.0], [5.0, -5.0]])[:, :d]
    return means[rng.integers(0, 3, n)] + rng.normal(scale=0.5, size=(n, d))


# --------------------------------------------------------------------------- Beam's key-coder warnings

def test_no_key_coder_warning_on_a_batch_run(tmp_path, seed_file, caplog):
    """The keyed stateful stages have deterministic key coders (type hints): Beam logs no
    'Key coder FastPrimitivesCoder … may not be deterministic' warning."""
    with caplog.at_level(logging.WARNING):
        result = job_mod.run([f"--output={tmp_path}/o", "--builtin_n=1500", "--tick_size=500",
                              f"--seed_file={seed_file}"])
    assert "DONE" in str(result.state)
    bad = [r.getMessage() for r in caplog.records if "deterministic" in r.getMessage()]
    assert bad == [], bad


# --------------------------------------------------------------------------- the end-of-run summary

def _main(argv, capsys, stdout=False):
    """Run the command; (exit code, stderr) — or (exit code, stderr, stdout)."""
    rc = job_mod.main(argv)
    cap = capsys.readouterr()
    return (rc, cap.err, cap.out) if stdout else (rc, cap.err)


def _warnings(err):
    return [ln for ln in err.splitlines() if ln.startswith("dpstream: warning:")]


def test_wrong_dim_dead_letters_every_row_and_the_summary_says_check_dim(tmp_path, seed_file, capsys):
    np.save(tmp_path / "x.npy", _blobs(1200))
    rc, err = _main([f"--input={tmp_path}/x.npy", "--dim=3", "--radius=12", "--tick_size=400",
                     "--horizon_ticks=3", f"--output={tmp_path}/o", f"--seed_file={seed_file}"], capsys)
    assert rc == 3  # a useless run fails for the scheduler, after its summary
    assert "run summary" in err and "wrong_dimension 1,200" in err
    w = _warnings(err)
    assert any("1,200 of 1,200 records (100%) were dead-lettered" in x and "--dim" in x for x in w), err
    assert any("no record reached the clusterer" in x for x in w), err


def test_a_healthy_run_prints_the_summary_and_no_warning(tmp_path, seed_file, capsys):
    np.save(tmp_path / "x.npy", _blobs(1200))
    rc, err = _main([f"--input={tmp_path}/x.npy", "--dim=2", "--radius=12", "--tick_size=400",
                     "--horizon_ticks=3", f"--output={tmp_path}/o", f"--seed_file={seed_file}"], capsys)
    assert rc == 0 and "run summary" in err
    assert _warnings(err) == [], err
    lines = {ln.split("  ")[1].strip(): ln for ln in err.splitlines() if ln.startswith("  ")}
    assert lines["records read"].split()[-1] == "1,200" and lines["valid"].split()[-1] == "1,200"


def test_latlon_without_center_warns_about_clipping_with_the_exact_count(tmp_path, seed_file, capsys):
    rng = np.random.default_rng(3)
    X = np.c_[rng.normal(48.85, 0.05, 1500), rng.normal(2.35, 0.05, 1500)]  # Paris, in degrees
    np.save(tmp_path / "ll.npy", X)
    argv = [f"--input={tmp_path}/ll.npy", "--dim=2", "--radius=6", "--tick_size=500", "--horizon_ticks=3",
            f"--output={tmp_path}/o", f"--seed_file={seed_file}"]
    result = job_mod.run(argv)
    counts = job_mod.operator_counts(result)
    assert counts["clipped"] == int((np.linalg.norm(X, axis=1) > 6).sum()) == 1500
    rc, err = _main(argv[:-2] + [f"--output={tmp_path}/o2", f"--seed_file={_fresh_seed(tmp_path, 's2')}"],
                    capsys)
    assert rc == 0
    assert any("--radius and --center" in x and "1,500 of 1,500" in x for x in _warnings(err)), err
    # the same data with its public center: nothing clipped, no warning
    rc, err = _main(argv[:-2] + ["--center=48.85,2.35", "--radius=1", f"--output={tmp_path}/o3",
                                 f"--seed_file={_fresh_seed(tmp_path, 's3')}"], capsys)
    assert rc == 0 and _warnings(err) == [], err
    # the exact counts stay out of every release file
    for name in os.listdir(tmp_path / "o"):
        if name == "non_private":  # raw data for the operator: never a release file
            continue
        text = (tmp_path / "o" / name).read_text()
        assert "run summary" not in text and "clipped" not in text


def test_a_file_longer_than_the_horizon_warns_with_the_slot_arithmetic(tmp_path, seed_file, capsys):
    np.save(tmp_path / "x.npy", _blobs(2000))
    rc, err = _main([f"--input={tmp_path}/x.npy", "--dim=2", "--radius=12", "--tick_size=50",
                     "--horizon_ticks=10", f"--output={tmp_path}/o", f"--seed_file={seed_file}"], capsys)
    assert rc == 0
    w = [x for x in _warnings(err) if "beyond the horizon" in x]
    assert w and "1,500 records" in w[0] and "--horizon_ticks" in w[0] and "500 slots" in w[0], err


class _FakeCounter:
    def __init__(self, name, v):
        self.key = type("K", (), {"metric": type("M", (), {"name": name})()})()
        self.committed, self.attempted = v, v


class _FakeStreamingResult:
    state = "RUNNING"

    def __init__(self):
        self.cancelled = False

    def wait_until_finish(self):
        raise KeyboardInterrupt

    def cancel(self):
        self.cancelled = True

    def metrics(self):
        counts = {"read": 10, "valid": 10, "ticked": 2, "outside_horizon": 8, "points_processed": 2,
                  "ticks_released": 3}
        return type("R", (), {"query": lambda self, f: {"counters": [_FakeCounter(k, v)
                                                                      for k, v in counts.items()]}})()


def test_a_cancelled_stream_prints_the_summary_and_the_t_start_warning(monkeypatch, capsys):
    """Streaming: Ctrl-C cancels the job, then the summary and its warnings are printed."""
    fake = _FakeStreamingResult()
    monkeypatch.setattr(job_cli, "launch", lambda job, beam_args, wait=True: fake)
    rc, err = _main(["--input_subscription=projects/p/subscriptions/s", "--output=/tmp/unused-dpstream",
                     "--dim=2", "--radius=1", "--tick_seconds=10", "--horizon_ticks=3"], capsys)
    assert rc == 0 and fake.cancelled
    assert "cancelling" in err and "run summary" in err
    assert any("8 of 10 timestamped records" in x and "--t_start" in x for x in _warnings(err)), err


# --------------------------------------------------------------------------- --t_start is a time

@pytest.mark.parametrize("value, tick_seconds, index", [
    ("2026-12-01T10:00:00Z", 10.0, 1796119200 // 10),
    ("2026-12-01T11:00:00+01:00", 10.0, 1796119200 // 10),
    ("2026-12-01T10:00:07.5Z", 10.0, 1796119200 // 10),    # inside the first tick
    ("1796119200", 10.0, 179611920),
    ("1796119209.9", 10.0, 179611920),
    ("1796119200", 60.0, 1796119200 // 60),
    ("0", 1.0, 0),
    ("tick:179611920", 10.0, 179611920),                    # the index itself, explicitly marked
])
def test_t_start_accepts_a_time_and_derives_the_tick_index(value, tick_seconds, index):
    job, _ = job_mod.parse_args(["--input_subscription=projects/p/subscriptions/s", "--output=/tmp/unused",
                                 "--dim=2", "--radius=1", f"--tick_seconds={tick_seconds:g}",
                                 f"--t_start={value}", "--horizon_ticks=3"])
    assert job.t_start == index and job.t_start_given


@pytest.mark.parametrize("value, message", [
    ("2026-12-01T10:00:00", "no time zone"),
    ("yesterday", "is not a time"),
    ("1796119200000", "milliseconds"),
    ("tick:abc", "integer tick index"),
    ("tick:1796119200000", "year 9999"),
])
def test_a_bad_t_start_is_one_line_saying_what_to_write(value, message, capsys):
    rc, err = _main(["--input_subscription=projects/p/subscriptions/s", "--output=/tmp/unused", "--dim=2",
                     "--radius=1", "--tick_seconds=10", f"--t_start={value}", "--horizon_ticks=3"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and message in err, err


def _timestamped_jsonl(path, t0, n=600, seconds=60.0):
    X = _blobs(n)
    ts = t0 + np.sort(np.random.default_rng(1).uniform(0, seconds, n))
    path.write_text("".join(json.dumps({"x": x.tolist(), "ts": float(s)}) + "\n" for x, s in zip(X, ts)))


def test_a_timestamped_file_needs_t_start(tmp_path, capsys):
    _timestamped_jsonl(tmp_path / "ev.jsonl", 1796119200.0)
    rc, err = _main([f"--input={tmp_path}/ev.jsonl", "--dim=2", "--radius=12", "--tick_seconds=10",
                     "--horizon_ticks=6", f"--output={tmp_path}/o"], capsys)
    assert rc == 2 and "missing --t_start" in err and len(err.strip().splitlines()) == 1, err


def test_a_timestamped_file_with_its_start_time_clusters_every_record(tmp_path, seed_file, capsys):
    _timestamped_jsonl(tmp_path / "ev.jsonl", 1796119200.0)
    argv = [f"--input={tmp_path}/ev.jsonl", "--dim=2", "--radius=12", "--tick_seconds=10", "--horizon_ticks=6",
            "--t_start=2026-12-01T10:00:00Z", f"--output={tmp_path}/o", f"--seed_file={seed_file}"]
    result = job_mod.run(argv)
    c = job_mod.operator_counts(result)
    assert c["points_processed"] == 600 and c.get("outside_horizon", 0) == 0
    # a start time a day off: every record is outside the horizon, and the summary says to check --t_start
    rc, err = _main(argv[:-3] + ["--t_start=2026-12-02T10:00:00Z", f"--output={tmp_path}/o2",
                                 f"--seed_file={_fresh_seed(tmp_path)}"], capsys)
    assert rc == 3  # nothing clustered: a useless run
    w = [x for x in _warnings(err) if "outside the horizon" in x]
    assert w and "600 of 600" in w[0] and "--t_start" in w[0] and "2026-12-02T10:00:00Z" in w[0], err


# --------------------------------------------------------------------------- --format and --csv_header

def _read_jsonl(path):
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _jsonl_with_strays(path, n=300):
    lines = [json.dumps({"x": x.tolist()}) for x in _blobs(n)]
    lines[10] = "1.5,2.5"      # a CSV line inside a .jsonl
    lines[20] = "garbage"
    path.write_text("\n".join(lines) + "\n")


def test_the_format_follows_the_file_extension(tmp_path, seed_file):
    _jsonl_with_strays(tmp_path / "in.jsonl")
    argv = [f"--input={tmp_path}/in.jsonl", "--dim=2", "--radius=12", "--tick_size=100", "--horizon_ticks=3",
            f"--output={tmp_path}/o", f"--seed_file={seed_file}"]
    c = job_mod.operator_counts(job_mod.run(argv))
    dead = sorted(_read_jsonl(tmp_path / "o" / "non_private" / "dead_letter.jsonl"), key=lambda d: d["slot"])
    assert [(d["slot"], d["reason"]) for d in dead] == [(10, "malformed_json"), (20, "malformed_json")]
    assert all("not valid JSON" in d["detail"] for d in dead)
    assert c["points_processed"] == 298
    # --format auto sniffs each line: the CSV line is a point, 'garbage' a one-field CSV line
    c = job_mod.operator_counts(job_mod.run(argv[:-2] + ["--format=auto", f"--output={tmp_path}/a",
                                                         f"--seed_file={_fresh_seed(tmp_path)}"]))
    dead = _read_jsonl(tmp_path / "a" / "non_private" / "dead_letter.jsonl")
    assert [(d["slot"], d["reason"]) for d in dead] == [(20, "wrong_dimension")]
    assert c["points_processed"] == 299


@pytest.mark.parametrize("fmt, files", [("csv", "x.npy"), ("numpy", "x.csv"), ("json", "x.npy")])
def test_a_format_that_cannot_read_the_files_is_a_one_line_error(tmp_path, fmt, files, capsys):
    np.save(tmp_path / "x.npy", _blobs(10))
    (tmp_path / "x.csv").write_text("1,2\n")
    rc, err = _main([f"--input={tmp_path}/{files}", f"--format={fmt}", "--dim=2", "--radius=12",
                     "--horizon_ticks=3", f"--output={tmp_path}/o"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and f"--format {fmt} cannot read" in err, err


def test_csv_header_skips_the_first_line_and_keeps_no_slot(tmp_path, seed_file, capsys):
    X = _blobs(1000)
    (tmp_path / "pts.csv").write_text("lat,lon\n" + "".join(f"{float(a)!r},{float(b)!r}\n" for a, b in X))
    argv = [f"--input={tmp_path}/pts.csv", "--dim=2", "--radius=12", "--tick_size=100", "--horizon_ticks=10"]
    c = job_mod.operator_counts(job_mod.run(argv + ["--csv_header", f"--output={tmp_path}/h",
                                                    f"--seed_file={seed_file}"]))
    # slot 0 is the first data row: 1000 rows fill ticks 1..10 exactly
    assert c["read"] == c["valid"] == c["points_processed"] == 1000 and c.get("outside_horizon", 0) == 0
    assert _read_jsonl(tmp_path / "h" / "non_private" / "dead_letter.jsonl") == []
    # without the flag the header is a dead letter that keeps slot 0, and the launch log says so
    rc, err = _main(argv + [f"--output={tmp_path}/n", f"--seed_file={_fresh_seed(tmp_path)}"], capsys)
    assert rc == 0 and "pass --csv_header" in err
    dead = _read_jsonl(tmp_path / "n" / "non_private" / "dead_letter.jsonl")
    assert [(d["slot"], d["reason"]) for d in dead] == [(0, "non_numeric")]
    assert "1 records were beyond the horizon" in err  # the last row moved to slot 1000: tick 11


def test_csv_header_without_csv_input_is_an_error(tmp_path, capsys):
    np.save(tmp_path / "x.npy", _blobs(10))
    rc, err = _main([f"--input={tmp_path}/x.npy", "--csv_header", "--dim=2", "--radius=12", "--horizon_ticks=3",
                     f"--output={tmp_path}/o"], capsys)
    assert rc == 2 and "--csv_header" in err


# --------------------------------------------------------------------------- input files checked at launch

def test_an_object_npy_is_refused_at_launch_with_one_line(tmp_path, capsys):
    np.save(tmp_path / "obj.npy", np.array([[1.0, "a"], [2.0, "b"]], dtype=object), allow_pickle=True)
    rc, err = _main([f"--input={tmp_path}/obj.npy", "--dim=2", "--radius=12", "--horizon_ticks=3",
                     f"--output={tmp_path}/o"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "obj.npy" in err and "dtype object" in err and "astype" in err
    assert not (tmp_path / "o").exists()  # nothing started


def test_a_truncated_npy_and_an_unreadable_input_are_one_line_errors(tmp_path, capsys):
    np.save(tmp_path / "t.npy", _blobs(100))
    data = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(data[:-50])
    rc, err = _main([f"--input={tmp_path}/t.npy", "--dim=2", "--radius=12", "--horizon_ticks=3",
                     f"--output={tmp_path}/o"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "truncated" in err, err
    (tmp_path / "d.npy").mkdir()  # a path that names something unreadable as a file
    rc, err = _main([f"--input={tmp_path}/d.npy", "--dim=2", "--radius=12", "--horizon_ticks=3",
                     f"--output={tmp_path}/o"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "cannot read --input file" in err, err


# --------------------------------------------------------------------------- output places and run failures

@pytest.mark.parametrize("where, message", [
    ("output_under_a_file", "a part of the path is a file"),
    ("output_is_a_file", "is a file, not a directory"),
    ("output_unwritable", "cannot write --output /proc/"),
    ("dead_letter_unwritable", "cannot write --dead_letter /proc/"),
    ("dead_letter_under_a_file", "cannot write --dead_letter"),
    ("dead_letter_is_a_directory", "is a directory: give a file path"),
])
def test_bad_output_places_are_one_line_errors_before_the_run(tmp_path, where, message, capsys):
    np.save(tmp_path / "x.npy", _blobs(50))
    (tmp_path / "f").write_text("a file")
    out = {"output_under_a_file": f"{tmp_path}/f/out", "output_is_a_file": f"{tmp_path}/f",
           "output_unwritable": "/proc/dpstream-test/out"}.get(where, f"{tmp_path}/o")
    argv = [f"--input={tmp_path}/x.npy", "--dim=2", "--radius=12", "--horizon_ticks=3", f"--output={out}"]
    dead = {"dead_letter_unwritable": "/proc/dpstream-test/dead.jsonl",
            "dead_letter_under_a_file": f"{tmp_path}/f/dead.jsonl", "dead_letter_is_a_directory": str(tmp_path)}
    if where in dead:
        argv.append(f"--dead_letter={dead[where]}")
    rc, err = _main(argv, capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("dpstream: error: ") and message in err, err
    assert "Traceback" not in err


def test_a_failure_inside_the_pipeline_is_one_line_naming_the_step_and_option(tmp_path, monkeypatch, capsys):
    """What only fails while the pipeline runs (here: the input file vanishes after the launch checks)
    ends with one line, exit 2, never a traceback."""
    np.save(tmp_path / "x.npy", _blobs(50))
    real = job_mod.launch

    def launch_after_the_file_is_gone(job, beam_args, wait=True):
        os.remove(tmp_path / "x.npy")
        return real(job, beam_args, wait)

    monkeypatch.setattr(job_cli, "launch", launch_after_the_file_is_gone)
    monkeypatch.delenv("DPSTREAM_DEBUG", raising=False)
    rc, err = _main([f"--input={tmp_path}/x.npy", "--dim=2", "--radius=12", "--horizon_ticks=3",
                     f"--output={tmp_path}/o"], capsys)
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("dpstream: error: the job failed") and "x.npy" in lines[-1], err
    assert "check --input" in lines[-1] and "Traceback" not in err


def test_a_rerun_says_what_it_overwrites_and_leaves_no_beam_temp_folder(tmp_path, seed_file, capsys,
                                                                        monkeypatch):
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmpdir"))
    os.makedirs(tmp_path / "tmpdir")
    np.save(tmp_path / "x.npy", _blobs(300))
    argv = [f"--input={tmp_path}/x.npy", "--dim=2", "--radius=12", "--tick_size=100", "--horizon_ticks=3",
            f"--output={tmp_path}/o", f"--seed_file={seed_file}"]
    rc, err = _main(argv, capsys)
    assert rc == 0 and "overwriting" not in err
    assert os.listdir(tmp_path / "tmpdir") == []  # the DirectRunner's Prism attempt left beam-temp* here
    rc, err = _main(argv, capsys)
    assert rc == 0
    line = next(ln for ln in err.splitlines() if "overwriting" in ln)
    assert "releases.jsonl" in line and "dead_letter.jsonl" in line
    assert os.listdir(tmp_path / "tmpdir") == []


def test_the_demo_removes_its_seed_file_at_exit(tmp_path, monkeypatch):
    """make demo-pubsub writes a secret seed file: it is gone when the demo ends (here by an error)."""
    import tempfile
    from pipelines import demo_pubsub

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = {}

    class FakePubSub:
        kind, host = "fake", "none"

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def topic(self, name):
            return f"projects/p/topics/{name}"

        def subscription(self, topic, name):
            return f"projects/p/subscriptions/{name}"

    def fake_run(argv):
        seed = next(a.split("=", 1)[1] for a in argv if a.startswith("--seed_file="))
        seen["seed"] = seed
        seen["existed"] = os.path.exists(seed) and os.stat(seed).st_mode & 0o077 == 0
        raise RuntimeError("stop the demo here")

    monkeypatch.setattr("pipelines.local_pubsub.LocalPubSub", FakePubSub)
    monkeypatch.setattr(job_mod, "run", fake_run)
    with pytest.raises(RuntimeError, match="stop the demo"):
        demo_pubsub.main(["--ticks=2", "--tick_seconds=1"])
    assert seen["existed"], "the demo wrote no private seed file"
    assert not os.path.exists(seen["seed"]) and os.listdir(tmp_path) == []


# --------------------------------------------------------------------------- --report for every batch input

def _csv(path, X, header=False):
    path.write_text(("x,y\n" if header else "") + "".join(f"{float(a)!r},{float(b)!r}\n" for a, b in X))


@pytest.mark.parametrize("kind", ["csv", "jsonl", "npy"])
def test_report_evaluates_every_batch_file_input(tmp_path, seed_file, capsys, kind):
    X = _blobs(900, seed=4)
    if kind == "csv":
        _csv(tmp_path / "in.csv", X, header=True)
        extra = ["--csv_header"]
    elif kind == "jsonl":
        (tmp_path / "in.jsonl").write_text("".join(json.dumps({"x": x.tolist()}) + "\n" for x in X))
        extra = []
    else:
        np.save(tmp_path / "in.npy", X)
        extra = []
    out = tmp_path / "o"
    rc, err = _main([f"--input={tmp_path}/in.{kind}", "--dim=2", "--radius=12", "--k=3", "--tick_size=300",
                     "--horizon_ticks=3", f"--output={out}", f"--seed_file={seed_file}", "--report", *extra], capsys)
    assert rc == 0, err
    ev = json.loads((out / "non_private" / "evaluation.json").read_text())
    assert ev["NON_PRIVATE"] and ev["n_points"] == 900 and ev["objective"] == "kmeans"
    assert (out / "non_private" / "report.png").stat().st_size > 1000
    assert not (out / "evaluation.json").exists() and not (out / "report.png").exists()
    assert "dpstream: report:" in err  # the progress line of the slow part
    from dpstream.offline import cost
    centers = np.asarray(json.loads((out / "centers.json").read_text())["centers"])
    assert ev["cost_ratio_final"] == pytest.approx(cost(X, centers, z=2) / ev["reference_cost"], rel=1e-9)


def test_report_with_kmedian_uses_the_kmedian_cost(tmp_path, seed_file, capsys):
    X = _blobs(900, seed=5)
    np.save(tmp_path / "in.npy", X)
    out = tmp_path / "o"
    rc, err, stdout = _main([f"--input={tmp_path}/in.npy", "--dim=2", "--radius=12", "--k=3", "--tick_size=300",
                             "--horizon_ticks=3", "--objective=kmedian", f"--output={out}",
                             f"--seed_file={seed_file}", "--report"], capsys, stdout=True)
    assert rc == 0, err
    ev = json.loads((out / "non_private" / "evaluation.json").read_text())
    assert ev["objective"] == "kmedian" and "Σ distances" in ev["cost"] and "Weiszfeld" in ev["reference"]
    from dpstream.offline import cost
    centers = np.asarray(json.loads((out / "centers.json").read_text())["centers"])
    assert ev["cost_ratio_final"] == pytest.approx(cost(X, centers, z=1) / ev["reference_cost"], rel=1e-9)
    assert ev["cost_ratio_final"] != pytest.approx(cost(X, centers, z=2) / ev["reference_cost"], rel=1e-3)
    assert "final k-median cost (Σ distances)" in stdout and "NON-PRIVATE" in stdout


def test_report_on_a_timestamped_file_uses_the_event_time_ticks(tmp_path, seed_file, capsys):
    _timestamped_jsonl(tmp_path / "ev.jsonl", 1796119200.0)
    out = tmp_path / "o"
    rc, err = _main([f"--input={tmp_path}/ev.jsonl", "--dim=2", "--radius=12", "--k=3", "--tick_seconds=10",
                     "--horizon_ticks=6", "--t_start=1796119200", f"--output={out}", f"--seed_file={seed_file}",
                     "--report"], capsys)
    assert rc == 0, err
    ev = json.loads((out / "non_private" / "evaluation.json").read_text())
    assert ev["n_points"] == 600 and [t for t, _ in ev["prefix_cost_ratios"]] == [1, 2, 3, 4, 5, 6]


def test_report_says_why_it_cannot_evaluate(tmp_path, seed_file, capsys):
    np.save(tmp_path / "x.npy", _blobs(300))
    out = tmp_path / "o"
    (out).mkdir()
    (out / "evaluation.json").write_text("{}")  # an earlier run's evaluation must not survive
    rc, err, stdout = _main([f"--input={tmp_path}/x.npy", "--dim=3", "--radius=12", "--tick_size=100",
                             "--horizon_ticks=3", f"--output={out}", f"--seed_file={seed_file}", "--report"],
                            capsys, stdout=True)
    assert rc == 3  # every row dead-lettered: a useless run
    assert "no non_private/evaluation.json / report.png: no valid record of the input lies inside the horizon" \
        in stdout
    assert not (out / "evaluation.json").exists() and (out / "centers.json").exists()


# --------------------------------------------------------------------------- help texts agree with the code

def test_help_texts_agree_with_the_code(tmp_path):
    np.save(tmp_path / "x.npy", _blobs(10))
    actions = {a.dest: a for a in job_mod.build_parser()._actions}
    assert actions["objective"].help and "kmedian" in actions["objective"].help
    assert "baseline" in actions["semicoreset"].help and "snap" in actions["semicoreset"].help
    assert f"(default {job_mod.DEFAULT_K})" in actions["k"].help
    builtin, _ = job_mod.parse_args([f"--output={tmp_path}/o"])
    files, _ = job_mod.parse_args([f"--input={tmp_path}/x.npy", "--dim=2", "--radius=1", "--horizon_ticks=1",
                                   f"--output={tmp_path}/o"])
    assert builtin.k == files.k == job_mod.DEFAULT_K
    from dpstream.datasets import default_stream
    assert default_stream(1)[2]["n_clusters"] == job_mod.DEFAULT_K  # the built-in stream's clusters


# --------------------------------------------------------------------------- progress

def test_progress_lines_report_ticks_and_do_not_change_the_releases(tmp_path, seed_file, caplog, monkeypatch):
    np.save(tmp_path / "x.npy", _blobs(1200))
    argv = [f"--input={tmp_path}/x.npy", "--dim=2", "--radius=12", "--tick_size=200", "--horizon_ticks=6",
            f"--seed_file={seed_file}"]
    monkeypatch.setenv("DPSTREAM_PROGRESS_SECONDS", "0")  # every release logs (default: every 5 s)
    with caplog.at_level(logging.INFO, logger="dpstream"):
        job_mod.run(argv + [f"--output={tmp_path}/a"])
    lines = [r.getMessage() for r in caplog.records if "dpstream: progress:" in r.getMessage()]
    assert [ln.split("tick ")[1].split(" ")[0] for ln in lines] == [f"{t}/6" for t in range(1, 7)], lines
    assert "points/s" in lines[-1] and "done in" in lines[-1] and "ETA" in lines[-2]
    # the same run without the progress branch releases exactly the same bytes
    import apache_beam as beam
    import pipelines.progress as progress

    class NoProgress(beam.PTransform):
        def __init__(self, *a, **kw):
            super().__init__()

        def expand(self, pcoll):
            return pcoll | beam.Map(lambda _: None)

    monkeypatch.setattr(progress, "LogProgress", NoProgress)
    job_mod.run(argv + [f"--output={tmp_path}/b"])
    a = sorted((tmp_path / "a" / "releases.jsonl").read_text().splitlines())
    assert len(a) == 6 and a == sorted((tmp_path / "b" / "releases.jsonl").read_text().splitlines())


def test_progress_rate_adds_up_the_runs_dp_counts(caplog, monkeypatch):
    """With --runs a release's count estimate covers its own run: the rate sums each run's latest estimate,
    so it does not fall back to zero when a run starts."""
    import pipelines.progress as progress
    monkeypatch.setattr(progress.time, "time", lambda: 110.0)  # 10 s after the launch at 100
    fn = progress.ReleaseProgress(6, 100.0, 0.0)
    fn.setup()
    rels = [{"run": r, "tick": t, "global_tick": 2 * r + t, "count_estimate": 100.0 * t} for r in range(3)
            for t in (1, 2)]
    with caplog.at_level(logging.INFO, logger="dpstream"):
        for rel in [rels[1], rels[0], *rels[2:]]:  # a late release of a run does not lower its count
            list(fn.process(rel))
    rates = [r.getMessage().split("~")[1].split(" ")[0] for r in caplog.records if "points/s" in r.getMessage()]
    assert rates == ["20", "20", "30", "40", "50", "60"], rates


def test_a_streaming_run_on_the_direct_runner_reports_exact_counters(tmp_path, seed_file):
    """The BundleBasedDirectRunner loses the counters of later bundles (Beam 2.77; pipelines.local_runner.metrics):
    with the workaround the streaming job's summary counts are exact over many bundles."""
    from apache_beam.coders import PickleCoder
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.utils.timestamp import Timestamp

    from pipelines.local_runner.metrics import install
    from tests.beam.runner_clock import runner_clock
    from transforms.parse import Record

    # an hour ahead of the wall clock (a whole number of ticks): no record is past its admission deadline
    t0 = float((int(time.time()) // 10 + 360) * 10)
    job, _ = job_mod.parse_args(["--input_subscription=projects/p/subscriptions/unused", f"--output={tmp_path}/o",
                                 "--dim=2", "--radius=12", "--tick_seconds=10", f"--t_start={t0:.0f}",
                                 "--horizon_ticks=4", "--allowed_lateness_seconds=0"])
    os.makedirs(tmp_path / "o")
    stream = TestStream(coder=PickleCoder())
    n, i = 0, 0
    for tick in range(4):  # one bundle per tick, plus a bad record and a record outside the horizon
        recs = [json.dumps({"x": x.tolist()}) for x in _blobs(30, seed=tick)] + ["{oops"]
        ts = t0 + tick * 10 + 1
        stream = stream.add_elements([beam.window.TimestampedValue(Record(r, None, ts, f"m{i + j}"),
                                                                   Timestamp.of(ts)) for j, r in enumerate(recs)])
        i += len(recs)
        n += 30
        stream = stream.advance_processing_time(2).advance_watermark_to(Timestamp.of(t0 + (tick + 1) * 10 + 3))
    far = t0 + 500
    stream = stream.add_elements([beam.window.TimestampedValue(Record('{"x": [1, 1]}', None, far, "far"),
                                                               Timestamp.of(far))])
    stream = stream.advance_processing_time(2).advance_watermark_to_infinity()
    install()
    opts = PipelineOptions(["--runner=BundleBasedDirectRunner"])
    opts.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(options=opts)
    job_mod.build(p, job, seed_file, source=p | stream)
    with runner_clock(t0 + 1):  # the runner's clock reads when the messages were published, whatever today is
        result = p.run()
        result.wait_until_finish()
    c = job_mod.operator_counts(result)
    assert c["read"] == n + 5 and c["valid"] == n + 1 and c["dead_letter_malformed_json"] == 4, c
    assert c["points_processed"] == n and c["outside_horizon"] == 1 and c["ticks_released"] == 4, c
