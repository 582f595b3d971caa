"""The batch Beam job survives the adversarial streams of tests/test_adversarial_streams.py, scaled
down (issue "Robustness"): identical points, every point far outside the radius, one tick holding
every point, and a horizon much longer than the data. Each run completes, releases exactly T
releases for ticks 1..T with finite centers in the ball (up to A's noise, see below), processes every
point, and releases what the library engine releases for the same ticks and seed."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                           exc_type=ImportError)

from apache_beam.metrics.metric import MetricsFilter  # noqa: E402

from dpstream import read_releases  # noqa: E402
from dpstream.engine import Engine  # noqa: E402
from pipelines import dp_stream_cluster as job_mod  # noqa: E402
from transforms.cluster import load_seed  # noqa: E402

DIM, RADIUS, K = 2, 10.0, 3


def _unit(rng, n):
    g = rng.normal(size=(n, DIM))
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def _identical(rng):
    return np.tile([[3.0, -4.0]], (3000, 1)), 750, 4


def _far_outside(rng):
    norms = RADIUS * 10.0 ** rng.uniform(2, 300, (3000, 1))
    x = _unit(rng, 3000) * norms
    x[:2] = [[1e308, -1e308], [-1.7976931348623157e308, 0.0]]
    return x, 750, 4


def _one_tick(rng):
    centers = np.array([[4.0, 4.0], [-4.0, 3.0], [1.0, -5.0]])
    return centers[rng.integers(0, 3, 3000)] + rng.normal(scale=0.6, size=(3000, DIM)), 3000, 4


def _mostly_empty(rng):
    return rng.normal(scale=3.0, size=(2000, DIM)), 1000, 64


@pytest.mark.parametrize("stream", [_identical, _far_outside, _one_tick, _mostly_empty],
                         ids=["identical", "far_outside", "one_tick", "mostly_empty"])
def test_batch_job_survives_adversarial_stream(tmp_path, stream):
    X, tick_size, T = stream(np.random.default_rng(11))
    np.save(tmp_path / "in.npy", X)
    seed_file = tmp_path / "seed"
    seed_file.write_text(os.urandom(32).hex())  # a fresh seed per run: the job refuses a reused one
    out = tmp_path / "out"
    argv = [f"--input={tmp_path}/in.npy", f"--output={out}", f"--dim={DIM}", f"--radius={RADIUS}", f"--k={K}",
            f"--tick_size={tick_size}", f"--horizon_ticks={T}", f"--seed_file={seed_file}"]
    result = job_mod.run(argv)
    assert "DONE" in str(result.state)

    rels = [r.to_dict() for r in read_releases(out)]
    assert [r["tick"] for r in rels] == list(range(1, T + 1))
    for r in rels:
        c = np.asarray(r["centers"], dtype=float)
        assert c.shape == (K, DIM) and np.isfinite(c).all()
        # inside the ball, up to A's noise: released centers are not clipped to it (a coreset point is a
        # noisy mean in a ring ball around its part's center, which can reach past Λ; measured up to
        # 1.025 Λ, so a fresh random seed must not make this test flaky)
        assert np.all(np.linalg.norm(c, axis=1) <= 1.5 * RADIUS), c
        pts = np.asarray(r["coreset_points"], dtype=float).reshape(-1, DIM)
        w = np.asarray(r["coreset_weights"], dtype=float)
        assert np.isfinite(pts).all() and np.isfinite(w).all() and np.all(w > 0)
        assert np.isfinite(r["count_estimate"])
    counters = {c.key.metric.name: c.committed
                for c in result.metrics().query(MetricsFilter().with_namespace("dpstream"))["counters"]}
    assert counters["read"] == counters["valid"] == X.shape[0] and counters.get("dead_letter", 0) == 0
    assert counters["points_processed"] == X.shape[0]
    assert counters["ticks_released"] == T

    # the same releases as the library engine over the same ticks (clipping included)
    job, _ = job_mod.parse_args(argv)
    eng = Engine(job_mod.engine_config(job), load_seed(str(seed_file)))
    want = []
    for t in range(1, T + 1):
        want.append(json.loads(json.dumps(eng.step(X[(t - 1) * tick_size:t * tick_size]).to_dict())))
    assert rels == want
