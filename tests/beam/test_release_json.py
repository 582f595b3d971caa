"""The release JSON encoded once in ClusterCoreset (transforms/release_json.py) is byte for byte
``json.dumps(release.to_dict())``, for repeated and changing coresets, and survives pickling."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

pytest.importorskip("apache_beam", reason="apache_beam is not importable", exc_type=ImportError)

from dpstream.engine import Engine  # noqa: E402
from dpstream.params import EngineConfig  # noqa: E402
from pipelines.sinks import json_line  # noqa: E402
from transforms.release_json import ReleaseDict, ReleaseEncoder  # noqa: E402


def test_encoded_text_is_json_dumps_of_the_dict():
    rng = np.random.default_rng(3)
    cfg = EngineConfig(dim=3, radius=20.0, n_clusters=2, horizon_ticks=12, epsilon=1.0)
    eng = Engine(cfg, b"0123456789abcdef0123456789abcdef")
    enc = ReleaseEncoder(size=2)  # small: the memo evicts during the run
    texts = set()
    for t in range(12):
        x = rng.normal(scale=3.0, size=(int(rng.integers(0, 60)), 3))
        x[:2] *= 1e-7  # tiny and huge magnitudes: float repr edge cases
        rel = eng.step(x)
        d = rel.to_dict()
        got = enc.release_dict(rel)
        assert got.json == json.dumps(d)
        assert got == d and json_line(got) == json.dumps(d)
        texts.add(got.json)
    assert len(texts) == 12
    # the memo is used: encoding the last release again encodes none of its number arrays anew
    calls = []
    real = json.dumps
    import transforms.release_json as rj
    rj.json.dumps = lambda v, *a, **k: (calls.append(type(v).__name__), real(v, *a, **k))[1]
    try:
        assert enc.release_dict(rel).json == got.json
    finally:
        rj.json.dumps = real
    assert "list" not in calls and "dict" not in calls, calls  # arrays and the privacy plan from the memo
    assert calls  # the scalar fields were encoded (the patch saw the calls)
    back = pickle.loads(pickle.dumps(got, protocol=pickle.HIGHEST_PROTOCOL))
    assert isinstance(back, ReleaseDict) and back.json == got.json and back == got
    assert json_line({"a": [1.5, float("nan")]}) == json.dumps({"a": [1.5, float("nan")]})
