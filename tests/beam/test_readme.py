"""The README's examples run as written: each shell command on small files of the shape it describes
(the Pub/Sub one is parsed and checked, not run: it needs a subscription), then each Python block."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("apache_beam", exc_type=ImportError)

from pipelines import dp_stream_cluster as job_mod  # noqa: E402

README = Path(__file__).resolve().parents[2] / "README.md"
PREFIX = ["python", "-m", "pipelines.dp_stream_cluster"]


def _blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def _own_files(tmp_path):
    rng = np.random.default_rng(0)
    paris = np.array([[48.85, 2.35], [48.80, 2.45], [48.90, 2.25]])
    P = paris[rng.integers(0, 3, 3000)] + rng.normal(scale=0.01, size=(3000, 2))
    (tmp_path / "trips.csv").write_text("user_id,lat,lon\n" + "".join(
        f"u{i % 50},{float(a)!r},{float(b)!r}\n" for i, (a, b) in enumerate(P)))
    import pyarrow as pa
    import pyarrow.parquet as pq
    E = rng.normal(size=(2000, 16)) + 3 * rng.normal(size=(4, 16))[rng.integers(0, 4, 2000)]
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    (tmp_path / "emb").mkdir()
    pq.write_table(pa.table({"doc": [f"d{i}" for i in range(2000)], **{f"e{j}": E[:, j] for j in range(16)}}),
                   str(tmp_path / "emb" / "part-0.parquet"))


def test_the_readme_examples_run_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DPSTREAM_SEED_REGISTRY", str(tmp_path / "registry.jsonl"))
    _own_files(tmp_path)
    commands = [shlex.split(b.replace("\\\n", " ")) for b in _blocks("sh")]
    assert len(commands) == 3 and all(c[:3] == PREFIX for c in commands)
    for argv in commands:
        argv = argv[3:]
        if any(a.startswith("--input_subscription") for a in argv):
            job, _ = job_mod.parse_args(argv)  # a valid job: the options are right as written
            assert job.streaming and job.runs is None and job.columns == ("lat", "lon")
            continue
        rc = job_mod.main(argv)
        err = capsys.readouterr().err
        assert rc == 0, err
        assert "warning" not in err, err
    assert (tmp_path / "out_trips" / "non_private" / "report.png").exists()
    assert (tmp_path / "out_emb" / "releases.jsonl").read_text().count("\n") == 24
    for code in _blocks("python"):
        exec(compile(code, "README.md", "exec"), {})
    assert "[[" in capsys.readouterr().out  # the centers printed
