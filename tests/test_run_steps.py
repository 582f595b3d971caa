"""The steps of a run that both drivers call (dpstream/run_setup.py, epochs.EpochSchedule,
release_step.py, run_window.py): the engine's run is exactly those steps, so the Beam stages that
call the same steps on the same DP outputs release what the engine releases."""
import numpy as np
import pytest

from dpstream import release_step
from dpstream.engine import Engine
from dpstream.epochs import EpochPlanner
from dpstream.params import EngineConfig, objective_exponent
from dpstream.run_setup import RunSetup
from dpstream.run_window import RunWindow, window_centers
from dpstream.runs import RunSequence

SEED = b"s" * 32


def _cfg(**kw):
    base = dict(dim=2, radius=12.0, n_clusters=3, horizon_ticks=16, epsilon=1.0)
    base.update(kw)
    return EngineConfig(**base)


def _ticks(n_ticks, rng, size=150):
    c = np.array([[-6.0, -5.0], [5.0, 4.0], [0.5, 6.0]])
    return [c[rng.integers(0, 3, size)] + rng.normal(0, 0.6, (size, 2)) for _ in range(n_ticks)]


def test_the_objective_exponent_is_one_for_k_median_two_for_k_means():
    assert objective_exponent("kmedian") == 1 and objective_exponent("kmeans") == 2
    assert _cfg(objective="kmedian").z == 1 and _cfg().z == 2
    with pytest.raises(ValueError):
        objective_exponent("kmedoids")


@pytest.mark.parametrize("run", [0, 3])
def test_the_planner_follows_the_engine_epoch_for_epoch(run):
    """The Beam job's EpochPlanner (DP counts only) and the engine step one EpochSchedule: the same
    adoption, flush and epoch at every tick, in any run (the run index enters the count's noise)."""
    cfg = _cfg(first_epoch_blocks=1.0, epoch_blocks=1.0)
    eng = Engine(cfg, SEED, run=run)
    planner = EpochPlanner(RunSetup(cfg, SEED, run=run))
    adopted = 0
    for x in _ticks(cfg.horizon_ticks, np.random.default_rng(4)):
        p = planner.step(len(x))
        before = eng.epoch
        rel = eng.step(x)
        assert p.epoch == before and eng.epoch == before + p.adopt
        assert (eng.last_flush == p.t) == p.flush
        assert p.count == rel.count_estimate
        adopted += p.adopt
    assert adopted >= 1  # the stream is large enough that the schedule changes epoch at least once


def test_the_engine_release_is_the_release_step_of_its_epochs():
    """What the engine releases at its last tick (a flush: the release is refitted there) is
    release_step.release of its closed epochs' coresets and its open rings."""
    cfg = _cfg(first_epoch_blocks=1.0, epoch_blocks=1.0)
    eng = Engine(cfg, SEED)
    for x in _ticks(cfg.horizon_ticks, np.random.default_rng(5)):
        rel = eng.step(x)
    assert eng.epoch >= 1 and len(eng.epoch_coresets) == eng.epoch
    again = release_step.release(cfg, eng.noise, eng.epoch_coresets, eng.mr.released(), eng.epoch,
                                 cfg.horizon_ticks)
    assert np.array_equal(again.coreset.points, rel.coreset_points)
    assert np.array_equal(again.coreset.weights, rel.coreset_weights)
    assert np.array_equal(again.centers, rel.centers)


@pytest.mark.parametrize("window_runs", [0, 2])
def test_the_run_sequence_window_is_the_run_window(window_runs):
    """RunSequence's window centers are RunWindow's sample of the closed runs' final coresets, the
    same object the Beam job's ReleaseCoreset keeps."""
    cfg = _cfg(horizon_ticks=4, runs=None, window_runs=window_runs)
    rs = RunSequence(cfg, SEED)
    win = RunWindow(cfg)
    finals = {}
    differs = False
    for g, x in enumerate(_ticks(4 * 4, np.random.default_rng(6), size=60), start=1):
        refits = rs.engine._refits if rs.engine.t < 4 else 0
        rel = rs.step(x)
        r, t = (g - 1) // 4, (g - 1) % 4 + 1
        if rs.engine._refits != refits:
            t0 = t  # the release (and its window) was refitted at t, under t's keys
        sample, first = win.sample(rs.engine.noise, r, rel.coreset_points, rel.coreset_weights, t0)
        assert rel.window_first_run == first
        assert np.array_equal(rel.window_centers, window_centers(cfg, rs.engine.noise, sample, rel.centers, t0))
        differs |= sample is not None and not np.array_equal(rel.window_centers, rel.centers)
        if t == 4:
            finals[r] = rel
            win.close_run(rs.engine.noise, r, rel.coreset_points, rel.coreset_weights)
    assert len(finals) == 4 and differs  # the later runs' windows hold earlier runs
