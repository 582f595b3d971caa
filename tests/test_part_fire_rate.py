"""The rate term of the part sparse vector (``part_fire_rate``, P23): a part's threshold raised to C2·W_ij·n̂_i plus a
margin where that is larger, from released values only.

* configuration: refused without ``part_fire``, without a DP count estimate, or with rings drawn from no
  release (``ring_centers`` other than ``bicriteria+released``);
* the raise is recomputed from published values only (W from the release published at the epoch's adoption
  tick, n̂ from the stream counter's outputs and the ring releases' ticks), and a raise read from an exact
  count fails that check;
* on a stream that keeps the release's shape it holds part fires back.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import dpstream.merge_reduce as mr_mod
from dpstream import Engine, rules
from dpstream.rings import assign_parts
from tests.test_part_fire import SEED, _cfg, _in_order

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")


@pytest.mark.parametrize("kw, message", [
    (dict(part_fire_rate=-1.0), "part_fire_rate must be a finite number >= 0"),
    (dict(part_fire_rate=math.inf), "part_fire_rate must be a finite number >= 0"),
    (dict(part_fire=0.0, part_fire_rate=2.0), "part_fire_rate needs part_fire > 0"),
    (dict(part_fire_rate=2.0, bicriteria=False, privacy_split=(0.0, 0.1, 0.9, 0.0)),
     "part_fire_rate needs a DP count estimate"),
    (dict(part_fire_rate=2.0, ring_centers="bicriteria"), "part_fire_rate needs ring_centers='bicriteria\\+released'"),
])
def test_part_fire_rate_is_checked(kw, message):
    with pytest.raises(ValueError, match=message):
        _cfg(**kw)


def test_rate_rule_is_c2_times_the_cells_share_of_the_count_plus_a_margin():
    W = np.array([[0.5, 0.0], [0.25, 0.25]])
    got = rules.part_fire_rate_threshold(2.0, W, np.array([100.0, -5.0]), 3.0)
    z = 3.0 * rules.PART_FIRE_MARGIN
    np.testing.assert_allclose(got, [[100.0 + z, z], [z, z]])  # a negative n̂ counts as 0


def _rate_run(monkeypatch):
    """An engine with the rate term over blobs in cluster order: per tick, the raise each epoch's part sparse
    vector was given, the stream counter's outputs, the published releases and the ring releases' ticks."""
    log = {"raise": [], "count": {}, "releases": {}, "ring_releases": [], "starts": {}, "rings_release": {}}
    orig_raise, orig_block = mr_mod.EpochMergeReduce._raise_by, mr_mod.RingMergeReduce.release_block
    orig_init = mr_mod.EpochMergeReduce.__init__

    def init(self, *a, **kw):
        orig_init(self, *a, **kw)
        log["rings_release"][self.epoch] = a[8] if len(a) > 8 else kw.get("release")

    def raise_by(self, count):
        out = orig_raise(self, count)
        log["raise"].append((self, len(log["count"]), None if out is None else out.copy()))
        return out

    def release_block(self, tick, *a):
        log["ring_releases"].append((self.epoch, self.ring, tick))
        return orig_block(self, tick, *a)

    monkeypatch.setattr(mr_mod.EpochMergeReduce, "_raise_by", raise_by)
    monkeypatch.setattr(mr_mod.EpochMergeReduce, "__init__", init)
    monkeypatch.setattr(mr_mod.RingMergeReduce, "release_block", release_block)
    cfg = _cfg(part_fire_rate=2.0)
    e = Engine(cfg, SEED)
    counter_step = e.counter.step

    def count(n):
        out = counter_step(n)
        log["count"][len(log["count"]) + 1] = float(out[0])  # the counter's output at this tick (unclamped)
        return out

    e.counter.step = count
    for t, x in enumerate(_in_order(), 1):
        mr = e.mr
        log["releases"][t] = e.step(x)
        if e.mr is not mr:
            log["starts"][e.mr.epoch] = (t, log["rings_release"][e.mr.epoch])
    return cfg, e, log


def check_rate_term(cfg, e, log):
    """The raise of (ring i, part j) at tick t is max(0, C2·W_ij·n̂_i + Z·b − C·M/P), recomputed from published
    values only: W from the release coreset published at the epoch's adoption tick, n̂_i from the stream
    counter's outputs (its output at t less its output at ring i's last release, or at the epoch's start)."""
    checked = 0
    for mr, t, out in log["raise"]:
        if mr.epoch == 0:
            assert out is None  # the first epoch's rings were drawn from no release
            continue
        start, ring_release = log["starts"][mr.epoch]
        rel = log["releases"][start]
        points, weights = np.asarray(rel.coreset_points, float), np.asarray(rel.coreset_weights, float)
        np.testing.assert_array_equal(ring_release.points, points)  # the rings' release is the published one
        np.testing.assert_array_equal(ring_release.weights, weights)
        I, P = cfg.n_rings, mr.centers.shape[0]
        r, f = assign_parts(points, mr.centers, cfg.ring_base, I, cfg.ring_ratio, cfg.ring_tolerance)
        W = np.bincount(r * P + f, weights=np.maximum(weights, 0), minlength=I * P).reshape(I, P)
        W = W / W.sum()
        last = [max([s for ep, i, s in log["ring_releases"] if ep == mr.epoch and i == ring and s < t] + [start])
                for ring in range(I)]
        n_hat = np.array([log["count"][t] - log["count"][s] for s in last])
        thr = rules.part_fire_threshold(cfg.part_fire, e.block_size, P, e.plan.part_svt_scale)
        want = np.maximum(rules.part_fire_rate_threshold(cfg.part_fire_rate, W, n_hat, e.plan.part_svt_scale)
                          - thr[None, :], 0.0).ravel()
        assert out is not None
        np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-9)
        checked += int(np.any(want > 0))
    assert checked > 5  # ticks whose raise was not zero


def test_the_rate_term_reads_the_release_and_the_dp_count_only(monkeypatch):
    """The rate term's raise is a function of published values (the release the epoch's rings were drawn from
    and the stream counter's outputs) and public ticks only: no exact count of the data enters it."""
    check_rate_term(*_rate_run(monkeypatch))


def test_rate_term_check_catches_an_exact_count(monkeypatch):
    """A rate term whose n̂_i is the ring's pending block's exact count fails the check."""
    orig = rules.part_fire_rate_threshold

    def exact(self, count):
        if self.part_shares is None or count is None:
            return None
        n = np.array([r.block.n for r in self.rings], dtype=float)
        rate = orig(self.cfg.part_fire_rate, self.part_shares, n, self.plan.part_svt_scale).ravel()
        return np.maximum(rate - self.psvt.threshold, 0.0)

    monkeypatch.setattr(mr_mod.EpochMergeReduce, "_raise_by", exact)
    cfg, e, log = _rate_run(monkeypatch)
    with pytest.raises(AssertionError):
        check_rate_term(cfg, e, log)


def test_the_rate_term_holds_back_parts_the_release_expects_full():
    """A stream that keeps the shape of the release fills its cells as W says: the rate term raises those
    cells' thresholds, so fewer part fires than without it on the same stream (blobs in cluster order, then
    the same clusters again)."""
    ticks = _in_order()
    fires = {}
    for rate in (0.0, 4.0):
        e = Engine(_cfg(part_fire_rate=rate, horizon_ticks=60), SEED)
        n = 0
        for t in range(60):
            mr = e.mr
            before = mr.part_fires
            e.step(ticks[t % len(ticks)])
            n += mr.part_fires - before
        fires[rate] = n
    assert fires[4.0] < fires[0.0]
