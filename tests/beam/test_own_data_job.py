"""The job on a data engineer's own files: exit codes a scheduler can act on, CSV columns and
delimiters, Parquet, ISO 8601 event times, the NON-PRIVATE report in its own folder, --plan_only."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                          exc_type=ImportError)

from pipelines import dp_stream_cluster as job_mod  # noqa: E402
from pipelines.job import cli as job_cli  # noqa: E402  (main's launch, patched)
from pipelines.exit_codes import EXIT_USELESS  # noqa: E402


def _seed(tmp_path, name="seed"):
    p = tmp_path / name
    p.write_bytes(os.urandom(32).hex().encode())
    return str(p)


def _main(argv, capsys):
    rc = job_mod.main(argv)
    cap = capsys.readouterr()
    return rc, cap.err, cap.out


def _gps(n, seed=0):
    rng = np.random.default_rng(seed)
    means = np.array([[48.85, 2.35], [48.80, 2.45], [48.90, 2.25]])
    return means[rng.integers(0, 3, n)] + rng.normal(scale=0.01, size=(n, 2))


def test_an_empty_input_exits_with_the_useless_code_after_the_summary(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((0, 2)))
    rc, err, _ = _main([f"--input={tmp_path}/x.npy", "--dim=2", "--radius=1", "--tick_size=10",
                        "--horizon_ticks=2", f"--output={tmp_path}/o", f"--seed_file={_seed(tmp_path)}"], capsys)
    assert rc == EXIT_USELESS == 3
    assert err.index("run summary") < err.index("exit 3") and "nothing was read" in err


def test_csv_with_a_text_column_reads_the_named_columns_and_the_report_stays_out_of_the_release_folder(
        tmp_path, capsys):
    X = _gps(600)
    (tmp_path / "trips.csv").write_text("user_id,lat,lon\n" + "".join(f"u{i % 7},{float(a)!r},{float(b)!r}\n"
                                                                     for i, (a, b) in enumerate(X)))
    out = tmp_path / "o"
    (out / "non_private").mkdir(parents=True)
    (out / "non_private" / "report.png").write_bytes(b"an earlier run's picture")
    (out / "evaluation.json").write_text("{}")  # where older versions wrote it
    rc, err, stdout = _main([f"--input={tmp_path}/trips.csv", "--columns=lat,lon", "--center=48.85,2.35",
                             "--radius=0.5", "--k=3", "--tick_size=200", "--horizon_ticks=3", f"--output={out}",
                             f"--seed_file={_seed(tmp_path)}", "--report"], capsys)
    assert rc == 0, err
    lines = {ln.split("  ")[1].strip(): ln.split()[-1] for ln in err.splitlines() if ln.startswith("  ")}
    assert lines["valid"] == "600" and lines["dead-lettered"] == "0", err
    assert "clipped onto the ball" in err and "warning" not in err
    ev = json.loads((out / "non_private" / "evaluation.json").read_text())
    assert ev["NON_PRIVATE"] and ev["n_points"] == 600
    assert (out / "non_private" / "report.png").read_bytes()[:4] == b"\x89PNG"
    # raw data (the dead letters, the evaluation) only under non_private/: the top level is what may ship
    assert sorted(os.listdir(out)) == ["centers.json", "non_private", "privacy_plan.md", "releases.jsonl"]
    assert sorted(os.listdir(out / "non_private")) == ["dead_letter.jsonl", "evaluation.json", "report.png"]
    assert f"the NON-PRIVATE evaluation (operator only, never publish): {out}/non_private/" in err
    assert f"{out}/non_private/" in stdout and not any(n.endswith(".tmp") for n in os.listdir(out / "non_private"))


def test_a_semicolon_csv_fails_with_a_delimiter_hint_and_reads_with_delimiter(tmp_path, capsys):
    X = _gps(300, seed=1)
    (tmp_path / "p.csv").write_text("".join(f"{float(a)!r};{float(b)!r}\n" for a, b in X))
    argv = [f"--input={tmp_path}/p.csv", "--dim=2", "--center=48.85,2.35", "--radius=0.5", "--tick_size=100",
            "--horizon_ticks=3"]
    rc, err, _ = _main(argv + [f"--output={tmp_path}/o", f"--seed_file={_seed(tmp_path)}"], capsys)
    assert rc == EXIT_USELESS and "--delimiter ';'" in err
    rc, err, _ = _main(argv + ["--delimiter=;", f"--output={tmp_path}/o2", f"--seed_file={_seed(tmp_path, 's2')}"],
                       capsys)
    assert rc == 0, err


def test_parquet_embeddings_and_every_counter_in_operator_counts(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    rng = np.random.default_rng(2)
    E = rng.normal(size=(500, 8)).astype(np.float32)
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    cols = {"doc": [f"d{i}" for i in range(500)], **{f"e{j}": E[:, j] for j in range(8)}}
    pq.write_table(pa.table(cols), str(tmp_path / "emb.parquet"))
    result = job_mod.run([f"--input={tmp_path}/emb.parquet", "--dim=8", "--radius=1", "--k=3", "--tick_size=250",
                          "--horizon_ticks=2", f"--output={tmp_path}/o", f"--seed_file={_seed(tmp_path)}"])
    c = job_mod.operator_counts(result)
    assert c["read"] == c["valid"] == c["points_processed"] == 500
    assert c["clipped"] == 0 and c["dead_letter_bad_ts"] == 0 and c["outside_horizon"] == 0  # zeros are listed
    rels = [json.loads(x) for x in open(tmp_path / "o" / "releases.jsonl")]
    assert len(rels) == 2 and np.asarray(rels[-1]["centers"]).shape == (3, 8)


def test_an_event_log_with_iso_8601_ts_is_clustered(tmp_path, capsys):
    import datetime
    X = _gps(300, seed=3)
    t0 = datetime.datetime(2026, 12, 1, 10, tzinfo=datetime.timezone.utc)
    (tmp_path / "ev.jsonl").write_text("".join(
        json.dumps({"lat": float(a), "lon": float(b), "ts": (t0 + datetime.timedelta(seconds=i * 0.1)).isoformat()
                    .replace("+00:00", "Z")}) + "\n" for i, (a, b) in enumerate(X)))
    rc, err, _ = _main([f"--input={tmp_path}/ev.jsonl", "--columns=lat,lon", "--center=48.85,2.35", "--radius=0.5",
                        "--tick_seconds=10", "--t_start=2026-12-01T10:00:00Z", "--horizon_ticks=3",
                        f"--output={tmp_path}/o", f"--seed_file={_seed(tmp_path)}"], capsys)
    assert rc == 0, err
    lines = {ln.split("  ")[1].strip(): ln.split()[-1] for ln in err.splitlines() if ln.startswith("  ")}
    assert lines["valid"] == "300" and "bad_ts" not in err


def test_plan_only_reads_no_data_and_version(tmp_path, capsys):
    rc, err, out = _main(["--input=/nonexistent/*.csv", "--dim=384", "--radius=1", "--horizon_ticks=100",
                          f"--output={tmp_path}/o"], capsys)
    assert rc == 2  # without --plan_only the input is checked
    rc, err, out = _main(["--input=/nonexistent/*.csv", "--dim=384", "--radius=1", "--horizon_ticks=100",
                          f"--output={tmp_path}/o2", "--plan_only"], capsys)
    assert rc == 0 and "block size M" in out and "state bound" in out and "Total spent" in out
    assert not os.path.exists(tmp_path / "o2")
    with pytest.raises(SystemExit) as e:
        job_mod.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("dpstream ")


def test_ctrl_c_leaves_no_beam_temp_folder(tmp_path, monkeypatch, capsys):
    np.save(tmp_path / "x.npy", np.zeros((10, 2)))

    def interrupted(job, beam_args, wait=True):  # a run stopped while its file sinks were writing
        os.makedirs(os.path.join(job.output, "beam-temp-releases.jsonl-0123"))
        raise KeyboardInterrupt

    monkeypatch.setattr(job_cli, "launch", interrupted)
    rc, err, _ = _main([f"--input={tmp_path}/x.npy", "--dim=2", "--radius=1", "--tick_size=10", "--horizon_ticks=1",
                        f"--output={tmp_path}/o"], capsys)
    assert rc == 130 and os.listdir(tmp_path / "o") == []


def test_an_unreachable_remote_output_fails_fast_with_one_line(monkeypatch):
    import time

    from apache_beam.io.filesystems import FileSystems

    from pipelines import outputs
    monkeypatch.setattr(FileSystems, "exists", lambda path: time.sleep(3))  # a client retrying without credentials
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="cannot reach --output gs://b/out within 0.2 s"):
        outputs.check_remote("gs://b/out", "--output", timeout=0.2)
    assert time.monotonic() - t0 < 2


def test_a_file_is_written_whole_or_not_at_all(tmp_path):
    from pipelines.outputs import write_atomic, write_text_atomic
    path = tmp_path / "centers.json"
    write_text_atomic(str(path), "old")

    def half(tmp):
        with open(tmp, "w") as fh:
            fh.write("ne")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic(str(path), half)
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["centers.json"]


def test_csv_and_json_read_in_blocks_release_what_the_same_points_as_npy_release(tmp_path):
    rng = np.random.default_rng(6)
    X = rng.normal(size=(900, 2)) * 3
    (tmp_path / "a.csv").write_text("".join(f"{float(a)!r},{float(b)!r}\n" for a, b in X))
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"x": [float(a), float(b)]}) + "\n" for a, b in X))
    np.save(tmp_path / "a.npy", X)
    seed = _seed(tmp_path)
    outs = []
    for ext in ("csv", "jsonl", "npy"):
        job_mod.run([f"--input={tmp_path}/a.{ext}", "--dim=2", "--radius=12", "--k=3", "--tick_size=300",
                     "--horizon_ticks=3", f"--output={tmp_path}/{ext}", f"--seed_file={seed}",
                     f"--seed_registry={tmp_path}/registry-{ext}.jsonl"])
        outs.append((tmp_path / ext / "releases.jsonl").read_bytes())
    assert outs[0] == outs[1] == outs[2] and outs[0].count(b"\n") == 3


def test_a_rerun_removes_the_earlier_non_private_evaluation_before_it_starts(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((10, 2)))
    out = tmp_path / "o"
    (out / "non_private").mkdir(parents=True)
    for f in ("non_private/evaluation.json", "non_private/report.png", "evaluation.json", "report.png",
              "centers.json", "privacy_plan.md"):
        (out / f).write_text("an earlier run's")
    job, _ = job_mod.parse_args([f"--input={tmp_path}/x.npy", "--dim=2", "--radius=1", "--tick_size=10",
                                 "--horizon_ticks=1", f"--output={out}"])
    job_mod.check_outputs(job)  # at launch, before any release is written: a Ctrl-C later leaves no mismatch
    assert os.listdir(out / "non_private") == [] and not (out / "evaluation.json").exists()
    assert not (out / "report.png").exists()
    # this run writes no report: the earlier run's centers and plan would sit beside other releases
    assert not (out / "centers.json").exists() and not (out / "privacy_plan.md").exists()
