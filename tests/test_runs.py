"""Runs of T ticks under parallel composition (dpstream/runs.py; P17).

* The stream rolls over from run to run: ≥ 5 runs, every release carries its run, its tick within
  the run and the global tick; a closed run's state is dropped, so the state stays flat; after the
  last allowed run the next tick is refused.
* A record of run r reaches only run r's mechanisms: the tracer record's exact counts differ in run r
  only, run < r releases are identical, and under one seed the noise keys consumed with and without
  it are the same multiset (the noise-key audit of P15, across runs); the runs' keys never overlap;
  and later runs see run r only through its releases: the stream without the record, given the
  releases of the stream with it, releases the same afterwards (a window built from a closed run's
  raw points is caught).
* The window's centers (the released coresets of the last W closed runs and the current one, merged)
  are within 1.2× of the window's optimum on a drifting stream; W = 0 covers all runs.
* The plan states the guarantee across runs.
"""
from __future__ import annotations

import numpy as np
import pytest

import broken_variants  # tests/broken_variants.py (tests/ is on sys.path under pytest)
from sklearn.cluster import KMeans

from dpstream import DPStreamClusterer, EngineConfig
from dpstream.counters import HorizonExceeded
from dpstream.offline import cost
from dpstream.runs import RunSequence

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")

SEED = bytes(range(100, 132))
T = 12


def _cfg(**kw):
    base = dict(n_clusters=3, dim=2, radius=30.0, epsilon=2.0, horizon_ticks=T, runs=None, window_runs=1,
                block_size=300)
    base.update(kw)
    return EngineConfig(**base)


def _drift(r, rng, n=400):
    means = np.array([[0.0, 0.0], [8.0, 0.0], [0.0, 8.0]]) + r * np.array([2.0, 1.5])
    lab = rng.integers(0, 3, n)
    return means[lab] + rng.normal(scale=0.6, size=(n, 2))


def test_runs_roll_over_with_run_tick_and_global_tick_and_flat_state():
    rs = RunSequence(_cfg(), SEED)
    rng = np.random.default_rng(0)
    states = []
    for r in range(6):
        for t in range(1, T + 1):
            rel = rs.step(_drift(r, rng))
            assert (rel.run, rel.tick, rel.global_tick) == (r, t, r * T + t)
            d = rel.to_dict()
            assert d["run"] == r and d["global_tick"] == r * T + t and len(d["window_centers"]) == 3
        states.append(rs.state_size())
        assert rs.engine.t == T and rs.run == r
    assert max(states[1:]) <= 1.5 * min(states[1:]), states  # no growth across runs
    assert rs.n_points == 6 * T * 400


def test_the_last_allowed_run_refuses_the_next_tick():
    rs = RunSequence(_cfg(runs=2), SEED)
    for _ in range(2 * T):
        rs.step(np.zeros((0, 2)))
    with pytest.raises(HorizonExceeded, match="runs"):
        rs.step(np.zeros((0, 2)))
    one = RunSequence(_cfg(runs=1), SEED)
    for _ in range(T):
        one.step(np.zeros((0, 2)))
    with pytest.raises(HorizonExceeded):
        one.step(np.zeros((0, 2)))


def _trace_run(cfg, ticks):
    rs = RunSequence(cfg, SEED, trace=True)
    rels, keys, exact = [], [], []
    for t, x in enumerate(ticks):
        run_before = rs.run if rs.engine.t < cfg.horizon_ticks else rs.run + 1
        rels.append(rs.step(x))
        if rs.engine.t == cfg.horizon_ticks:  # the run ends: keep what its engine consumed
            keys.append(rs.engine.noise.keys.copy())
            exact.append(rs.engine.counter.exact.copy())
        assert rs.run == run_before
    return rels, keys, exact


def _replayed(cfg, ticks, releases):
    """The run sequence on ``ticks`` whose window, at each roll, gets the closed run's final release
    taken from ``releases`` (another sequence's): what a later run sees of earlier runs is then
    exactly those releases."""
    rs = RunSequence(cfg, SEED)
    roll = rs._roll

    def replay_roll():
        roll()
        final = releases[rs.run * cfg.horizon_ticks - 1]
        rs.closed[-1] = (rs.run - 1, final.coreset_points, final.coreset_weights)

    rs._roll = replay_roll
    return [rs.step(x) for x in ticks]


def check_a_record_reaches_its_run_only():
    cfg = _cfg(epsilon=1.0)
    rng = np.random.default_rng(1)
    ticks = [_drift(t // T, rng, 200) for t in range(4 * T)]
    x_tick = 2 * T + 5  # a tick of run 2
    with_x = [a.copy() for a in ticks]
    with_x[x_tick] = np.r_[with_x[x_tick], [[-20.0, 20.0]]]
    r0, k0, e0 = _trace_run(cfg, ticks)
    r1, k1, e1 = _trace_run(cfg, with_x)
    # runs 0 and 1: identical releases; run 2's exact counter differs by the one record, the others not
    for a, b in zip(r0[:2 * T], r1[:2 * T]):
        np.testing.assert_array_equal(a.centers, b.centers)
        np.testing.assert_array_equal(a.coreset_weights, b.coreset_weights)
    assert [int(b[0] - a[0]) for a, b in zip(e0, e1)] == [0, 0, 1, 0]
    # run 3 sees run 2 only through run 2's releases: the stream without x, given the releases of the
    # stream with x, releases in run 3 exactly what the stream with x releases
    replay = _replayed(cfg, ticks, r1)
    for a, b in zip(replay[3 * T:], r1[3 * T:]):
        np.testing.assert_array_equal(a.window_centers, b.window_centers)
        np.testing.assert_array_equal(a.centers, b.centers)
        np.testing.assert_array_equal(a.coreset_weights, b.coreset_weights)
    # per run, the same multiset of noise keys (shapes never depend on where the record went)
    for a, b in zip(k0, k1):
        assert a == b
    # different runs never draw under the same key
    sets = [set(k for k, _ in ks) for ks in k0]
    for i in range(len(sets)):
        for j in range(i + 1, len(sets)):
            assert not (sets[i] & sets[j]), (i, j)
    assert all(k[:2] == ("run", 2) for k in sets[2])


def test_a_record_of_one_run_reaches_that_run_only():
    check_a_record_reaches_its_run_only()


def test_a_window_built_from_a_closed_runs_raw_points_is_caught(monkeypatch):
    broken_variants.window_from_raw_points(monkeypatch)
    with pytest.raises(AssertionError):
        check_a_record_reaches_its_run_only()


@pytest.mark.parametrize("window_runs", [1, 0])
def test_window_centers_track_the_window_on_a_drifting_stream(window_runs):
    cfg = _cfg(window_runs=window_runs, epsilon=1.0)
    rs = RunSequence(cfg, SEED)
    rng = np.random.default_rng(2)
    data = []
    for r in range(5):
        run_data = [_drift(r, rng) for _ in range(T)]
        for x in run_data:
            rel = rs.step(x)
        data.append(np.vstack(run_data))
        if r == 0:
            continue
        window = np.vstack(data[max(0, r - window_runs):] if window_runs else data)
        opt = cost(window, KMeans(3, n_init=10, random_state=0).fit(window).cluster_centers_)
        ratio = cost(window, rel.window_centers) / opt
        assert ratio <= 1.2, (r, ratio)
        assert rel.window_first_run == (max(0, r - window_runs) if window_runs else 0)


def test_the_library_rolls_over_when_asked_and_the_plan_says_why():
    m = DPStreamClusterer(3, epsilon=1.0, radius=30.0, random_state=0, horizon_ticks=T, runs=3)
    rng = np.random.default_rng(3)
    for t in range(3 * T):
        m.partial_fit(_drift(t // T, rng, 100))
    assert m.release_.run == 2 and m.n_ticks_ == 3 * T and m.window_centers_.shape == (3, 2)
    with pytest.raises(HorizonExceeded):
        m.partial_fit(_drift(3, rng, 100))
    d = m.privacy_plan_.to_dict()
    assert d["runs"] == 3 and "parallel composition" in d["across_runs"]
    assert "Runs: up to 3 runs" in m.privacy_plan_.table()
    X = np.vstack([_drift(t // T, rng, 100) for t in range(2 * T)])
    f = DPStreamClusterer(3, epsilon=1.0, radius=30.0, random_state=0, tick_size=100, horizon_ticks=T,
                          runs=2).fit(X)
    assert f.release_.run == 1 and f.release_.tick == T
    with pytest.raises(ValueError, match="runs"):
        DPStreamClusterer(3, epsilon=1.0, radius=30.0, random_state=0, tick_size=100, horizon_ticks=T).fit(X)
