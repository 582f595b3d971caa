"""The main job with ``part_fire`` (P23: a sparse vector per (ring, part) whose ⊤ releases the ring's block; on by
default, ``--part_fire C`` sets it): the option, the same releases as the engine, the ring stage's restarts of
both sparse vectors, and the refusal of ``part_fire_rate``."""
from __future__ import annotations

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                          exc_type=ImportError)

from pipelines import dp_stream_cluster as job_mod  # noqa: E402
from tests.beam.test_pipeline import _blobs, _engine_overrides, _job_and_engine_on, seed_file  # noqa: E402,F401
from tests.test_part_fire import _in_order, assert_every_cause_seen, assert_whole_restarts  # noqa: E402


def test_batch_job_with_part_fire_releases_what_the_engine_releases(tmp_path, seed_file, monkeypatch):
    """part_fire (P23: a sparse vector per (ring, part) whose ⊤ releases the ring's block): blobs in cluster
    order pile into one part at a time and fire it; the job's AssignRings counts each tick's points per part
    in every shard (three here), RingMergeReduce sums them per ring and tests them as the engine's rings do,
    so the releases are the engine's."""
    import dpstream.merge_reduce as mr_mod

    part_fires = {}
    orig = mr_mod.EpochMergeReduce.step

    def step(self, *a, **kw):
        out = orig(self, *a, **kw)
        part_fires[id(self)] = self.part_fires
        return out

    monkeypatch.setattr(mr_mod.EpochMergeReduce, "step", step)
    X = np.concatenate(_in_order())
    got, want, job = _job_and_engine_on(X, tmp_path, seed_file, radius=12, k=3, tick_size=100, horizon=40,
                                        epsilon=8, extra=["--point_shards=3", "--part_fire=2"])
    assert job_mod.engine_config(job).part_fire == 2.0
    assert got == want and len(got) == 40
    assert sum(part_fires.values()) > 0  # the engine's part sparse vector did release blocks on this stream


def test_the_part_fire_option_sets_the_engines_parameter():
    base = ["--builtin_n=1000", "--tick_size=100", "--horizon_ticks=10", "--output=/tmp/unused"]
    cfg = job_mod.engine_config(job_mod.parse_args(base)[0])
    assert cfg.part_fire == 3.5  # the library's default
    assert job_mod.engine_config(job_mod.parse_args(base + ["--part_fire=0"])[0]).part_fire == 0.0
    assert job_mod.engine_config(job_mod.parse_args(base + ["--part_fire", "2.5"])[0]).part_fire == 2.5
    with pytest.raises(job_mod.OptionError, match="part_fire must be a finite number >= 0"):
        job_mod.parse_args(base + ["--part_fire=-1"])


def test_a_job_of_two_runs_tests_the_parts_by_each_runs_own_ticks(tmp_path, seed_file, monkeypatch):
    """--runs 2: the part sparse vector is not tested in each run's last quarter (rules.part_fire_open reads the
    run's tick, 1..T, as the engine's does); the job's releases are the library's RunSequence's, and part fires
    happen in both runs."""
    import json

    import dpstream.merge_reduce as mr_mod
    from dpstream.runs import RunSequence
    from tests.beam.test_pipeline import _read_jsonl, _run_batch
    from transforms.cluster import load_seed

    X = np.concatenate(_in_order(n=2400))  # 24 ticks of 100: two runs of 12
    np.save(tmp_path / "a.npy", X)
    argv = [f"--input={tmp_path}/a.npy", f"--output={tmp_path / 'out'}", "--dim=2", "--radius=12", "--k=3",
            "--tick_size=100", "--horizon_ticks=12", "--runs=2", f"--seed_file={seed_file}", "--epsilon=8",
            "--part_fire=2"]
    _run_batch(argv)
    got = sorted(_read_jsonl(tmp_path / "out" / "releases.jsonl"), key=lambda r: r["global_tick"])
    job, _ = job_mod.parse_args(argv)
    seq = RunSequence(job_mod.engine_config(job), load_seed(seed_file))
    fires, orig = [], mr_mod.fire_and_restart

    def counting(*a, **kw):
        fired, part_only = orig(*a, **kw)
        fires.append((seq.run, int(part_only.sum())))
        return fired, part_only

    monkeypatch.setattr(mr_mod, "fire_and_restart", counting)
    want = [json.loads(json.dumps(seq.step(X[i:i + 100]).to_dict())) for i in range(0, 2400, 100)]
    assert got == want and len(got) == 24
    assert {r for r, n in fires if n} == {0, 1}  # the part sparse vector released blocks in both runs


_RESTART_CAUSES = ("a part's fire restarts the ring instance", "the ring's fire restarts its part instances",
                   "a flush restarts the part instances")


def _ring_stage_restarts(monkeypatch, tmp_path, seed_file, keep=None):
    """The part_fire job above, recording every restart of the ring stage's sparse vectors (those holding one
    ring's instances): its tick, cause, mask, and the instances' counts and thresholds after it beside the
    fresh thresholds its key gives. ``keep`` breaks the restarts an instance's own ⊤ did not cause: "threshold"
    zeroes the count only, "count" draws the fresh threshold only."""
    import dpstream.sparse_vector as svt_mod

    log = {"out": {}, "restarts": []}
    orig_test, orig_restart = svt_mod.LevelZeroAboveThreshold.test, svt_mod.LevelZeroAboveThreshold.restart

    def test(self, tick, arrivals, *a):
        out = orig_test(self, tick, arrivals, *a)
        if self._held() is not None:
            log["out"][(self.key, self._held(), tick)] = np.array(out)
        return out

    def restart(self, tick, mask, tag=()):
        held, mask, tag = self._held(), np.asarray(mask, dtype=bool), tuple(tag)
        if held is None:
            return orig_restart(self, tick, mask, tag)
        # an instance not tested at this tick (a part one in the run's last quarter) had no ⊤ of its own
        own = (np.zeros_like(mask) if tag or (self.key, held, tick) not in log["out"]
               else log["out"][(self.key, held, tick)] & mask)
        fresh = (self.threshold + self.noise.laplace(self.key + ("threshold", tick) + tag, self.n, self.scale)
                 [held[0]:held[1]])
        if keep is None:
            orig_restart(self, tick, mask, tag)
        else:
            orig_restart(self, tick, own, tag)
            other = mask & ~own
            if keep == "threshold":
                self.count = np.where(other, 0, self.count)
            else:
                self.noisy_threshold = np.where(other, fresh, self.noisy_threshold)
        log["restarts"].append((self.key, held, tick, tag, mask, own, self.count.copy(),
                                np.array(self.noisy_threshold, dtype=float), fresh))

    monkeypatch.setattr(svt_mod.LevelZeroAboveThreshold, "test", test)
    monkeypatch.setattr(svt_mod.LevelZeroAboveThreshold, "restart", restart)
    _engine_overrides(monkeypatch, dict(part_fire=2.0))
    X = np.concatenate(_in_order())
    _job_and_engine_on(X, tmp_path, seed_file, radius=12, k=3, tick_size=100, horizon=40, epsilon=8,
                       extra=["--point_shards=3"])
    return log


def _check_ring_stage_restarts(log, causes=_RESTART_CAUSES):
    """A ring's release (its instance's ⊤ or one of its parts') restarts the ring instance and every part
    instance of the ring; each restart the other sparse vector or a flush caused zeroes the count and adopts
    the fresh threshold."""
    part_out = {(k[1], held[0] // (held[1] - held[0]), t): o for (k, held, t), o in log["out"].items()
                if k[0] == "part-svt"}
    seen = dict.fromkeys(_RESTART_CAUSES, 0)
    for key, held, t, tag, mask, own, count, thr, fresh in log["restarts"]:
        if key[0] == "svt":
            fired = log["out"][(key, held, t)][0] or part_out.get((key[1], held[0], t), np.zeros(1, bool)).any()
            assert mask.tolist() == [bool(fired)]
        cause = _RESTART_CAUSES[2 if tag else (0 if key[0] == "svt" else 1)]
        assert_whole_restarts(seen, causes, cause, mask & ~own, count, thr, fresh, t)
    assert_every_cause_seen(seen, causes)


def test_the_ring_stage_restarts_both_sparse_vectors(tmp_path, seed_file, monkeypatch):
    """P23 in the job's ring stage: every restart the other sparse vector or a flush causes is a whole one."""
    _check_ring_stage_restarts(_ring_stage_restarts(monkeypatch, tmp_path, seed_file))


@pytest.mark.parametrize("keep", ["threshold", "count"])
def test_ring_stage_restart_check_catches_half_restarts(tmp_path, seed_file, monkeypatch, keep):
    log = _ring_stage_restarts(monkeypatch, tmp_path, seed_file, keep)
    for cause in _RESTART_CAUSES:
        with pytest.raises(AssertionError, match=cause):
            _check_ring_stage_restarts(log, (cause,))


def test_the_job_refuses_part_fire_rate(tmp_path, seed_file, monkeypatch):
    """part_fire_rate (the rate term of the part threshold) is the engine's only: the job refuses it rather
    than release what the engine would not."""
    _engine_overrides(monkeypatch, dict(part_fire=3.0, part_fire_rate=2.0))
    X = _blobs(300, np.random.default_rng(0))
    with pytest.raises(ValueError, match="part_fire_rate is not available in the Beam job"):
        _job_and_engine_on(X, tmp_path, seed_file, radius=12, k=3, tick_size=100, horizon=4, epsilon=1)
