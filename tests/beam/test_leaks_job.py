"""Leaks that are not noise, through the Beam job (P18): a canary record never leaves verbatim —
not in a release, not in the dead letter of a valid record — and neighbouring streams get the same
number, ticks and timestamps of releases."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                          exc_type=ImportError)

from tests.beam.test_pipeline import (  # noqa: E402
    T0, _blobs, _event_records, _read_jsonl, _run_teststream)
from pipelines import dp_stream_cluster as job_mod  # noqa: E402

CANARY = np.array([3.1415926535897, -7.2718281828459])


def _seed(tmp_path, name):
    p = tmp_path / name
    p.write_text(os.urandom(32).hex())
    return str(p)


def _text_has(text: str, value: float) -> bool:
    """Is ``value`` (to 9 significant digits) written anywhere in ``text``?"""
    for tok in re.findall(r"-?\d+\.\d+(?:[eE][-+]?\d+)?", text):
        if abs(float(tok) - value) <= 1e-9 * max(1.0, abs(value)):
            return True
    return False


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_canary_never_leaves_the_batch_job(tmp_path, where):
    rng = np.random.default_rng(11)
    X = _blobs(1500, rng)
    pos = {"first": 0, "middle": 777, "last": 1499}[where]
    X[pos] = CANARY
    lines = [json.dumps({"x": x.tolist()}) for x in X]
    lines.insert(300, '{"x": [1.0, "not a number"]}')  # one invalid record: its dead letter is expected
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    job_mod.run([f"--input={tmp_path}/in.jsonl", f"--output={out}", "--dim=2", "--radius=12", "--k=3",
                 "--tick_size=100", "--horizon_ticks=16", f"--seed_file={_seed(tmp_path, 's')}"])
    releases = (out / "releases.jsonl").read_text()
    dead = (out / "non_private" / "dead_letter.jsonl").read_text()
    assert len(releases.splitlines()) == 16
    for v in CANARY:
        assert not _text_has(releases, v), f"canary coordinate {v} released"
        assert not _text_has(dead, v), f"canary coordinate {v} in a dead letter"
    assert [d["reason"] for d in _read_jsonl(out / "non_private" / "dead_letter.jsonl")] == ["non_numeric"]


def test_canary_scan_catches_a_release_that_carries_the_canary(tmp_path):
    """The scan above has teeth: a release that holds the canary among its coreset points is caught."""
    rel = {"coreset_points": [[0.5, 0.25], CANARY.tolist()], "centers": [[1.0, 2.0]]}
    assert _text_has(json.dumps(rel), CANARY[0])
    assert not _text_has(json.dumps({"coreset_points": [[0.5, 0.25]]}), CANARY[0])


def test_neighbouring_streams_release_at_the_same_ticks_and_times(tmp_path):
    """Add one record (at a tick that otherwise has none, the worst case for timing): the number,
    ticks and event-time timestamps of the releases do not change; only their content may."""
    seed = _seed(tmp_path, "seed")
    rng = np.random.default_rng(12)
    recs = _event_records(rng, 5, 10.0, skip={3})
    extra = (json.dumps({"x": CANARY.tolist(), "ts": T0 + 25.0}), T0 + 25.0)  # tick 3, otherwise empty
    a, stamps_a = _run_teststream(recs, tmp_path / "a", seed)
    b, stamps_b = _run_teststream(recs + [extra], tmp_path / "b", seed)
    assert stamps_a == stamps_b and len(stamps_a) == 8
    assert [r["tick"] for r in a] == [r["tick"] for r in b] == list(range(1, 9))
    releases_b = "\n".join(json.dumps(r) for r in b)
    assert not any(_text_has(releases_b, v) for v in CANARY)
