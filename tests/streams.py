"""Small test streams and probes shared by the flush-schedule and release-decay tests (on sys.path under pytest)."""
from __future__ import annotations

import numpy as np

MEANS = np.array([[6.0, 6.0], [-8.0, 3.0], [2.0, -9.0]])


def three_blob_ticks(seed: int, sizes) -> list:
    """One array per tick, ``sizes[i]`` points each, from three well-separated unit Gaussians in 2-d."""
    rng = np.random.default_rng(seed)
    return [MEANS[rng.integers(3, size=n)] + rng.normal(size=(n, 2)) for n in sizes]


def record_ring_releases(monkeypatch) -> list:
    """Patch ``RingMergeReduce.release_block`` to record ``(tick, epoch, ring)`` of every block a ring
    releases; returns the list it fills."""
    import dpstream.merge_reduce as mr_mod

    seen = []
    orig = mr_mod.RingMergeReduce.release_block

    def release_block(self, tick, *a):
        seen.append((tick, self.epoch, self.ring))
        return orig(self, tick, *a)

    monkeypatch.setattr(mr_mod.RingMergeReduce, "release_block", release_block)
    return seen


def release_fit_replays(cfg, seed: bytes, ticks: list, other_ticks: list, raw: dict, min_epochs: int = 2) -> bool:
    """Run an engine on ``ticks``, then another on ``other_ticks`` (other raw points); replay the first
    engine's last release fit sample from its released epoch coresets and keyed noise alone. True when the
    replay equals the engine's fit sample. ``raw["n"]`` holds each tick's exact size while it runs: what a
    broken decay rule could read besides the released sets."""
    import dpstream.epochs as epochs_mod
    from dpstream import Engine
    from dpstream.noise import NoiseSource
    from dpstream.semicoresets import WeightedSet

    def run(stream):
        e = Engine(cfg, seed)
        for x in stream:
            raw["n"] = len(x)
            e.step(x)
        return e

    e = run(ticks)
    assert len(e.epoch_coresets) >= min_epochs
    got = e._released.coreset
    sets, t, ep = list(e.epoch_coresets) + [e.mr.released()], e.t, e.epoch
    run(other_ticks)
    S = WeightedSet.concat(sets, cfg.dim)
    pts, w = epochs_mod.release_sample(cfg, NoiseSource(seed), S, ep, t, cfg.z)
    fp, fw = epochs_mod.release_fit_sample(cfg, NoiseSource(seed), sets, pts, w, ep, t, cfg.z)
    return np.array_equal(fp, got.fit_points) and np.array_equal(fw, got.fit_weights)


def decay_cfg(rule: str, **kw):
    """The release-decay tests' small 2-d configuration with ``release_decay_rule=rule`` (``kw`` overrides)."""
    from dpstream import EngineConfig

    base = dict(n_clusters=3, dim=2, radius=60.0, epsilon=1.0, delta=1e-6, horizon_ticks=64, release_decay_rule=rule)
    base.update(kw)
    return EngineConfig(**base)


def weighted_blobs(rng, centers, n: int, spread: float = 1.0):
    """A released-looking set: n Gaussian points (σ = ``spread``) around each 2-d center, weight 10 each."""
    from dpstream.semicoresets import WeightedSet

    P = np.vstack([rng.normal(size=(n, 2)) * spread + c for c in centers])
    return WeightedSet(P, np.full(len(P), 10.0), np.full(len(P), -1))
