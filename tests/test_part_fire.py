"""The part sparse vector (``part_fire``, P23): a LevelZero-AboveThreshold per (ring, part) of the open
epoch whose ⊤ releases the ring's pending block.

* participation: each record is in exactly one (ring, part) count, at its own ring (the counts of a
  ring's parts add up to the ring sparse vector's count), and still enters exactly one A call; a ring
  releases at most once per tick (a ring fire and a part fire on the same tick are one release);
* restarts: a ring's release restarts its ring instance and its part instances, a flush the flushed rings'
  part instances; each such restart zeroes the count and draws the fresh threshold of its key;
* audit: at a tick without arrivals every (ring, part) instance is tested and fires at the rate of its
  ledger line's Laplace scale, P(ν − ρ ≥ thr) = e^{−x}(2 + x)/4 with x = thr/b; a mechanism drawing at half
  the ledger's scale, or testing only on ticks with arrivals, fails;
* on by default at C = 3.5 (its configuration dict is that of before it was the default: a default run's
  releases are told apart by the algorithm version); ``part_fire=0`` turns it off: no part sparse
  vector, no ledger line; and an engine pickled before the option (off) steps as before.

Each check is shown to catch a broken engine. The rate term (``part_fire_rate``) is in
``tests/test_part_fire_rate.py``. The ledger's totals with the option on, and a plan that forgets
the line, are in ``tests/test_ledger.py``; the job's releases with the option on are the engine's
(``tests/beam/test_pipeline.py``).
"""
from __future__ import annotations

import dataclasses
import math
import pickle

import numpy as np
import pytest

import dpstream.merge_reduce as mr_mod
import dpstream.privacy as privacy_mod
import dpstream.semicoresets as sc_mod
import dpstream.sparse_vector as svt_mod
from dpstream import Engine, EngineConfig, rules
from dpstream.privacy import PrivacyPlan
from dpstream.rings import assign_parts, clip_to_ball

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")

SEED = bytes(range(32))
Z = 4.5  # binomial z-test at false-failure probability ≤ 1e-5


def _cfg(**kw):
    base = dict(n_clusters=3, dim=2, radius=12.0, epsilon=8.0, horizon_ticks=40, part_fire=2.0)
    base.update(kw)
    return EngineConfig(**base)


def _in_order(seed=3, n=1800):
    """Blobs in cluster order (each cluster piles into one part of its ring at a time), 100 points a tick."""
    rng = np.random.default_rng(seed)
    means = np.array([[-5.0, -5.0], [5.0, 5.0], [5.0, -5.0]])
    X = means[np.sort(rng.integers(0, 3, n))] + rng.normal(scale=0.5, size=(n, 2))
    return np.array_split(X, n // 100)


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan, True, "3"])
def test_part_fire_is_checked(bad):
    with pytest.raises(ValueError, match="part_fire must be a finite number >= 0"):
        _cfg(part_fire=bad)


def test_on_is_the_default_and_zero_turns_it_off():
    off, on = _cfg(part_fire=0), _cfg()
    default = EngineConfig(n_clusters=3, dim=2, radius=1.0, epsilon=1.0)
    assert default.part_fire == 3.5 and "part_fire" not in default.to_dict()
    assert off.to_dict()["part_fire"] == 0.0 and on.to_dict()["part_fire"] == 2.0
    assert EngineConfig(**off.to_dict()) == off and EngineConfig(**default.to_dict()) == default
    assert PrivacyPlan.build(default).participation["part_sparse_vector_instances"] == 1
    p = PrivacyPlan.build(off)
    assert p.part_svt_scale == 0.0 and all(ln.component != "part sparse vector" for ln in p.lines)
    e = Engine(off, SEED)
    assert e.mr.psvt is None


def test_an_engine_pickled_before_the_option_steps_and_releases_as_before():
    """An engine pickled before the part sparse vector (its epoch without ``psvt``, ``part_fires``,
    ``part_shares``, its ring sparse vector without ``span``; no ``_ring_release``) unpickles, steps and releases
    what an engine never pickled does."""
    cfg = EngineConfig(n_clusters=3, dim=2, radius=12.0, epsilon=1.0, horizon_ticks=40, part_fire=0.0)  # as then
    ticks = _in_order()
    a, b = Engine(cfg, SEED), Engine(cfg, SEED)
    for x in ticks[:6]:
        a.step(x)
        b.step(x)
    for name in ("psvt", "part_fires", "part_shares"):
        del b.mr.__dict__[name]
    del b.mr.svt.__dict__["span"]
    assert "_ring_release" not in b.__dict__  # a default engine keeps no release for the rate term
    old = pickle.loads(pickle.dumps(b))
    old.attach_seed(SEED)
    assert "psvt" not in old.mr.__dict__ and "span" not in old.mr.svt.__dict__
    for x in ticks[6:]:
        assert a.step(x).to_dict() == old.step(x).to_dict()
    assert a.mr.epoch == old.mr.epoch > 0  # the restored engine crossed an epoch change too


def test_threshold_rule_is_c_times_a_parts_share_of_the_block():
    np.testing.assert_array_equal(rules.part_fire_threshold(3.0, 1100, 11), np.full(11, 300.0))
    assert rules.part_fire_threshold(2.0, 500, 1).tolist() == [1000.0]
    cfg = _cfg()
    e = Engine(cfg, SEED)
    thr = rules.part_fire_threshold(cfg.part_fire, e.block_size, 1, e.plan.part_svt_scale)
    np.testing.assert_allclose(e.mr.psvt.threshold, np.tile(thr, cfg.n_rings))


@pytest.mark.parametrize("n_parts", [1, 4, 11, 65])
def test_the_threshold_is_never_below_its_noise_floor(n_parts):
    """The floor z·b: a ring's P empty parts fire on noise at rate 1/PART_FIRE_NOISE_TICKS per tick
    (P·e^{−z}(2 + z)/4, the chance of Lap(b) query noise minus Lap(b) threshold noise ≥ z·b), and the
    threshold is the larger of it and C·M/P."""
    b = 108.0
    floor = rules.part_fire_noise_floor(n_parts, b)
    z = floor / b
    assert n_parts * math.exp(-z) * (2 + z) / 4 == pytest.approx(1 / rules.PART_FIRE_NOISE_TICKS, rel=1e-9)
    assert rules.part_fire_threshold(3.5, 10, n_parts, b).tolist() == [floor] * n_parts  # C·M/P below it
    big = 3.5 * 10 ** 6 / n_parts
    assert rules.part_fire_threshold(3.5, 10 ** 6, n_parts, b).tolist() == [big] * n_parts


def test_a_small_block_keeps_its_parts_from_firing_on_noise(monkeypatch):
    """block_size = 120 with k = 3 (C·M/P about one Laplace scale), a shuffled stream of 30 points a tick:
    without the floor the part instances release blocks on noise at most ticks (blocks A cannot release a
    leaf of); with it, rarely."""
    cfg = EngineConfig(n_clusters=3, dim=2, radius=10.0, epsilon=1.0, horizon_ticks=200, block_size=120)
    rng = np.random.default_rng(4)
    means = np.array([[4.0, 4.0], [-4.0, 3.0], [1.0, -5.0]])
    ticks = [means[rng.integers(0, 3, 30)] + rng.normal(scale=0.6, size=(30, 2)) for _ in range(200)]
    orig = mr_mod.fire_and_restart

    def part_fires():
        count = [0]

        def counting(*a, **kw):
            fired, part_only = orig(*a, **kw)
            count[0] += int(part_only.sum())
            return fired, part_only

        monkeypatch.setattr(mr_mod, "fire_and_restart", counting)
        e = Engine(cfg, SEED)
        for x in ticks:
            e.step(x)
        return count[0], e

    n_floor, e = part_fires()
    P = e.mr.centers.shape[0]
    assert P > 1 and e.mr.psvt.threshold[0] == pytest.approx(rules.part_fire_noise_floor(P, e.plan.part_svt_scale))
    monkeypatch.setattr(rules, "part_fire_noise_floor", lambda n_parts, scale: 0.0)
    n_bare, _ = part_fires()
    assert n_bare > 100 and n_bare > 5 * max(n_floor, 1), (n_bare, n_floor)


@pytest.mark.parametrize("eps", [1.0, 8.0])
def test_the_block_size_floor_reads_the_sparse_vectors_whole_budget(eps):
    """The ring sparse vector keeps a third of ε_svt; M's floor 4·b_svt·ln T is still that of the whole ε_svt,
    so M is the block size without the option (here held by the floor: k·θ_k is far below it)."""
    on, off = _cfg(epsilon=eps), _cfg(epsilon=eps, part_fire=0)
    e_on, e_off = Engine(on, SEED), Engine(off, SEED)
    assert e_on.plan.svt_scale == pytest.approx(3 * e_off.plan.svt_scale)
    assert e_on.plan.svt_floor_scale == e_off.plan.svt_floor_scale == e_off.plan.svt_scale
    assert e_on.block_size == e_off.block_size
    assert e_off.block_size == int(4 * e_off.plan.svt_scale * math.log(on.horizon_ticks))
    old = pickle.loads(pickle.dumps(e_off.plan))  # a plan pickled before the field: its svt_scale is the floor's
    old.__dict__.pop("svt_floor_scale")
    assert rules.block_size(off, old, e_off.A.leaf_threshold()) == e_off.block_size


def test_unit_bound_scales_the_part_sparse_vector_as_the_ring_one():
    """A privacy unit of up to g points: both sparse vectors' sensitivities are g times a record's."""
    rec, unit = _cfg(epsilon=1.0), _cfg(epsilon=1.0, max_contributions=4)
    p_rec, p_unit = PrivacyPlan.build(rec), PrivacyPlan.build(unit)
    l_rec = {ln.component: ln for ln in p_rec.lines}
    l_unit = {ln.component: ln for ln in p_unit.lines}
    for name in ("sparse vector (Alg. 5)", "part sparse vector"):
        assert l_unit[name].sensitivity == 4 * l_rec[name].sensitivity
        assert l_unit[name].epsilon == pytest.approx(l_rec[name].epsilon)
    assert p_unit.part_svt_scale == pytest.approx(4 * p_rec.part_svt_scale)


# --------------------------------------------------------------------------- participation

def _spy(monkeypatch):
    """Records every sparse-vector test (key, tick, arrivals), every A call's block size and every
    ring release (epoch, ring, tick)."""
    log = {"tests": [], "a_points": 0, "a_calls": 0, "releases": [], "restarts": []}
    orig_test = svt_mod.LevelZeroAboveThreshold.test
    orig_release = sc_mod.Semicoreset.release
    orig_block = mr_mod.RingMergeReduce.release_block
    orig_step, orig_flush = mr_mod.EpochMergeReduce.step, mr_mod.EpochMergeReduce.flush

    def test(self, tick, arrivals, *a):
        out = orig_test(self, tick, arrivals, *a)
        log["tests"].append((self.key, tick, np.array(arrivals, dtype=np.int64), np.array(out)))
        return out

    def snap(mr):
        return {n: (o.count.copy(), np.array(o.noisy_threshold, dtype=float)) for n, o in (("svt", mr.svt),
                                                                                          ("psvt", mr.psvt))}

    def step(self, tick, *a):
        before = snap(self)
        out = orig_step(self, tick, *a)
        log["restarts"].append(("step", self, tick, before, snap(self), [r.last_release == tick for r in self.rings]))
        return out

    def flush(self, tick, *a):
        before, flushed = snap(self), np.array([r.last_release != tick for r in self.rings])
        orig_flush(self, tick, *a)
        log["restarts"].append(("flush", self, tick, before, snap(self), flushed))

    def release(self, block, key, *a):
        log["a_points"] += int(block.n)
        log["a_calls"] += 1
        return orig_release(self, block, key, *a)

    def release_block(self, tick, *a):
        log["releases"].append((self.epoch, self.ring, tick))
        return orig_block(self, tick, *a)

    monkeypatch.setattr(svt_mod.LevelZeroAboveThreshold, "test", test)
    monkeypatch.setattr(sc_mod.Semicoreset, "release", release)
    monkeypatch.setattr(mr_mod.RingMergeReduce, "release_block", release_block)
    monkeypatch.setattr(mr_mod.EpochMergeReduce, "step", step)
    monkeypatch.setattr(mr_mod.EpochMergeReduce, "flush", flush)
    return log


def _run(cfg, ticks, log):
    """The engine over ``ticks`` then empty ticks to the horizon; per tick, the points' (ring, part) cells."""
    e = Engine(cfg, SEED)
    cells = []
    part_fires = 0
    for t in range(1, cfg.horizon_ticks + 1):
        x = ticks[t - 1] if t <= len(ticks) else np.zeros((0, cfg.dim))
        mr = e.mr
        before = mr.part_fires
        xc, _ = clip_to_ball(x, e.center, cfg.radius)
        ring, f = assign_parts(xc, mr.centers, cfg.ring_base, cfg.n_rings, cfg.ring_ratio, cfg.ring_tolerance)
        cells.append((mr.epoch, mr.centers.shape[0], ring * mr.centers.shape[0] + f))
        e.step(x)
        part_fires += mr.part_fires - before
    return e, cells, part_fires


def check_one_cell_per_record(log, cells, cfg):
    """At every tick each record adds one to its own (ring, part) instance and to nothing else, and the
    ring's parts add up to what the ring sparse vector counts."""
    ring_tests = {t: a for k, t, a, _ in log["tests"] if k[0] == "svt"}
    part_tests = {t: (k, a) for k, t, a, _ in log["tests"] if k[0] == "part-svt"}
    # tested at every tick, empty ones too, but those of the run's last quarter (public ticks: not at all)
    open_ticks = [t for t in range(1, cfg.horizon_ticks + 1) if rules.part_fire_open(t, cfg.horizon_ticks)]
    assert sorted(part_tests) == open_ticks and len(open_ticks) == 3 * cfg.horizon_ticks // 4
    for t, (epoch, P, cell) in enumerate(cells, 1):
        if t not in part_tests:
            continue
        key, a = part_tests[t]
        assert key == ("part-svt", epoch) and a.shape == (cfg.n_rings * P,)
        np.testing.assert_array_equal(a, np.bincount(cell, minlength=cfg.n_rings * P))
        assert a.sum() == len(cell)
        np.testing.assert_array_equal(a.reshape(cfg.n_rings, P).sum(axis=1), ring_tests[t])


RESTART_CAUSES = ("a part's fire restarts its ring's instance", "a ring's fire restarts its part instances",
                  "a flush restarts the flushed rings' part instances")


def _fresh(svt, tick, tag=()):
    """The thresholds a restart at ``tick`` draws (LevelZero's restart: under the tick's key)."""
    return svt.threshold + svt.noise.laplace(svt.key + ("threshold", tick) + tag, svt.n, svt.scale)


def assert_whole_restarts(seen: dict, causes, cause: str, mask, count, thr, fresh, t: int) -> None:
    """The instances in ``mask``, restarted at tick t for ``cause``, have count 0 and exactly the fresh
    thresholds ``fresh``; counts them in ``seen`` (the engine's and the job's restart checks share this)."""
    if cause in causes and mask.any():
        seen[cause] += int(mask.sum())
        assert np.all(count[mask] == 0), f"{cause}: the count is not zeroed (tick {t})"
        np.testing.assert_array_equal(thr[mask], fresh[mask], err_msg=f"{cause}: no fresh threshold")


def assert_every_cause_seen(seen: dict, causes) -> None:
    for cause in causes:
        assert seen[cause] > 0, f"{cause}: never happened in this run"


def check_restarts(log, cfg, causes=RESTART_CAUSES):
    """Every restart the other sparse vector or a flush causes zeroes the instance's count AND draws its fresh
    threshold under the restart's key (an instance that keeps either would count a record in two segments, or
    test a new segment against a threshold its old one already revealed); an instance not restarted keeps its
    threshold, and a flush leaves the ring instances alone (their counts keep the flushed points). Each cause
    of ``causes`` occurs in the run and is checked."""
    out = {(k, t): o for k, t, _, o in log["tests"]}
    seen = dict.fromkeys(RESTART_CAUSES, 0)
    for kind, mr, t, before, after, rings in log["restarts"]:
        I, P = cfg.n_rings, mr.centers.shape[0]
        (c0, r0), (c1, r1) = before["svt"], after["svt"]
        (pc0, pr0), (pc1, pr1) = [(c.reshape(I, P), r.reshape(I, P)) for c, r in (before["psvt"], after["psvt"])]
        if kind == "step":
            ring_out = out[(mr.svt.key, t)]
            # the part instances are not tested in the run's last quarter (rules.part_fire_open): no part ⊤
            part_out = out.get((mr.psvt.key, t), np.zeros(I * P, dtype=bool)).reshape(I, P)
            assert ((mr.psvt.key, t) in out) == rules.part_fire_open(t, cfg.horizon_ticks)
            released = ring_out | part_out.any(axis=1)
            assert rings == released.tolist()  # the rings that released at the step
            np.testing.assert_array_equal(r1[~released], r0[~released])  # no restart: the same thresholds
            np.testing.assert_array_equal(pr1[~released], pr0[~released])
            cases = [(RESTART_CAUSES[0], released & ~ring_out, c1, r1, _fresh(mr.svt, t)),
                     (RESTART_CAUSES[1], ring_out[:, None] & ~part_out, pc1, pr1,
                      _fresh(mr.psvt, t).reshape(I, P))]
        else:
            np.testing.assert_array_equal(c1, c0)  # the flush does not restart the ring instances
            np.testing.assert_array_equal(r1, r0)
            flushed = np.asarray(rings)  # the rings that had not released at this tick
            np.testing.assert_array_equal(pr1[~flushed], pr0[~flushed])
            cases = [(RESTART_CAUSES[2], np.repeat(flushed[:, None], P, axis=1), pc1, pr1,
                      _fresh(mr.psvt, t, ("flush",)).reshape(I, P))]
        for cause, mask, count, thr, fresh in cases:
            assert_whole_restarts(seen, causes, cause, mask, count, thr, fresh, t)
    assert_every_cause_seen(seen, causes)


def check_one_a_call_per_record(log, n_points):
    """Every point enters exactly one A call (the horizon flushes the rest), and a ring releases at most
    once per tick."""
    assert log["a_points"] == n_points
    assert len(log["releases"]) == len(set(log["releases"]))


def test_each_record_is_in_one_part_count_and_one_a_call(monkeypatch):
    log = _spy(monkeypatch)
    ticks = _in_order()
    cfg = _cfg()
    _, cells, part_fires = _run(cfg, ticks, log)
    assert part_fires >= 3  # the part sparse vector released blocks on this stream
    check_one_cell_per_record(log, cells, cfg)
    check_one_a_call_per_record(log, sum(len(x) for x in ticks))
    check_restarts(log, cfg)


def _broken_restart(keep):
    """A restart the instance's own ⊤ did not cause (the other sparse vector's, or a flush's) only half done:
    ``keep`` = "threshold" zeroes the count but keeps the threshold, "count" draws a fresh threshold but keeps
    the count."""
    orig_test, orig_restart = svt_mod.LevelZeroAboveThreshold.test, svt_mod.LevelZeroAboveThreshold.restart

    def test(self, tick, arrivals, *a):
        out = orig_test(self, tick, arrivals, *a)
        self._own = (tick, np.array(out))
        return out

    def restart(self, tick, mask, tag=()):
        mask = np.asarray(mask, dtype=bool)
        t, own = getattr(self, "_own", (None, None))
        own = own & mask if t == tick and not tag else np.zeros_like(mask)
        other = mask & ~own
        orig_restart(self, tick, own, tag)
        if keep == "threshold":
            self.count = np.where(other, 0, self.count)
        else:
            self.noisy_threshold = np.where(other, _fresh(self, tick, tuple(tag)), self.noisy_threshold)

    return test, restart


@pytest.mark.parametrize("keep", ["threshold", "count"])
def test_restart_check_catches_half_restarts(monkeypatch, keep):
    """Each restart cause's check catches both half restarts."""
    log = _spy(monkeypatch)
    test, restart = _broken_restart(keep)
    monkeypatch.setattr(svt_mod.LevelZeroAboveThreshold, "test", test)
    monkeypatch.setattr(svt_mod.LevelZeroAboveThreshold, "restart", restart)
    cfg = _cfg()
    _run(cfg, _in_order(), log)
    for cause in RESTART_CAUSES:
        with pytest.raises(AssertionError, match=cause):
            check_restarts(log, cfg, (cause,))


def _broken_two_parts(monkeypatch):
    """Each point also counted in the next part (two instances per record)."""
    orig = svt_mod.LevelZeroAboveThreshold.test  # already the spy

    def test(self, tick, arrivals, *rest):
        a = np.asarray(arrivals, dtype=np.int64)
        return orig(self, tick, a + np.roll(a, 1) if self.key[0] == "part-svt" else a, *rest)

    monkeypatch.setattr(svt_mod.LevelZeroAboveThreshold, "test", test)


def _broken_part_fire_keeps_the_block(monkeypatch):
    """A part fire releases the block through A but keeps its points pending (they enter A again)."""
    orig = mr_mod.EpochMergeReduce.step

    def step(self, tick, x, ring, f, count=None):
        kept = {id(r): r.block for r in self.rings}
        before = self.part_fires
        fired = orig(self, tick, x, ring, f, count)
        if self.part_fires > before:
            for r in self.rings:
                if r.last_release == tick:
                    r.block = kept[id(r)]
        return fired

    monkeypatch.setattr(mr_mod.EpochMergeReduce, "step", step)


def _broken_twice_a_tick(monkeypatch):
    """A ring that fires and whose part fires on the same tick releases twice."""
    orig = mr_mod.EpochMergeReduce.step

    def step(self, tick, x, ring, f, count=None):
        fired = orig(self, tick, x, ring, f, count)
        for i in np.flatnonzero(fired):
            self.rings[i].release_block(tick, count)  # a second (empty) release of the same tick
        return fired

    monkeypatch.setattr(mr_mod.EpochMergeReduce, "step", step)


@pytest.mark.parametrize("name, caught_by", [("two_parts", "cell"), ("keeps_block", "a_call"),
                                              ("twice_a_tick", "a_call")])
def test_participation_checks_catch_broken_engines(monkeypatch, name, caught_by):
    """Each broken engine fails the check meant for it (and passes the other)."""
    log = _spy(monkeypatch)
    {"two_parts": _broken_two_parts, "keeps_block": _broken_part_fire_keeps_the_block,
     "twice_a_tick": _broken_twice_a_tick}[name](monkeypatch)
    ticks = _in_order()
    cfg = _cfg()
    _, cells, _ = _run(cfg, ticks, log)
    checks = {"cell": lambda: check_one_cell_per_record(log, cells, cfg),
              "a_call": lambda: check_one_a_call_per_record(log, sum(len(x) for x in ticks))}
    with pytest.raises(AssertionError):
        checks.pop(caught_by)()
    for other in checks.values():
        other()


# --------------------------------------------------------------------------- audit of the noise scale

def _audit_fires(monkeypatch, n_parts=400, thr=150.0):
    """Tick 1 of an epoch with P parts and no arrivals: the (ring, part) instances that fired, and the
    rate the ledger line's scale gives them (C chosen so that the rule's threshold is ``thr`` points, about
    one Laplace scale; the threshold's noise floor, which keeps such fires rare, is lifted: the audit is of
    the noise)."""
    monkeypatch.setattr(rules, "part_fire_noise_floor", lambda n_parts, scale: 0.0)
    base = _cfg(epsilon=1.0, n_clusters=2)
    cfg = base.with_(part_fire=thr * n_parts / Engine(base, SEED).block_size)
    e = Engine(cfg, SEED)
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(n_parts, cfg.dim))
    mr = mr_mod.EpochMergeReduce(cfg, e.plan, e.noise, e.A, 1, centers, e.block_size)
    seen = []
    orig = mr.psvt.test

    def test(tick, arrivals, *a):
        out = orig(tick, arrivals, *a)
        seen.append((tick, out.copy()))
        return out

    mr.psvt.test = test
    empty = np.zeros(0, dtype=np.int64)
    mr.step(1, np.zeros((0, cfg.dim)), empty, empty)
    line = {ln.component: ln for ln in e.plan.lines}["part sparse vector"]
    b = 2 * line.sensitivity / line.epsilon  # the ledger line's Laplace scale Lap(2Δ/ε)
    t = rules.part_fire_threshold(cfg.part_fire, e.block_size, n_parts, e.plan.part_svt_scale)[0]
    assert t == pytest.approx(thr) and mr.psvt.threshold[0] == pytest.approx(thr)
    x = t / b
    return seen, math.exp(-x) * (2 + x) / 4, cfg.n_rings * n_parts


def check_rate(seen, p, n):
    """The instances were tested at the empty tick and fired at rate p (binomial z-test)."""
    assert [t for t, _ in seen] == [1], "the part sparse vector must be tested at a tick without arrivals"
    k = int(seen[0][1].sum())
    assert abs(k - n * p) < Z * math.sqrt(n * p * (1 - p)), (k, n * p)


def test_part_sparse_vector_fires_at_its_ledger_scale_at_an_empty_tick(monkeypatch):
    seen, p, n = _audit_fires(monkeypatch)
    assert 0.2 < p < 0.35  # a rate the test resolves (half the scale: about 0.13)
    check_rate(seen, p, n)


def _broken_half_scale(monkeypatch):
    """The mechanism draws at half the scale its ledger line charges for."""
    orig = privacy_mod.PrivacyPlan.build.__func__

    def build(cls, cfg, test_seed=False):
        p = orig(cls, cfg, test_seed)
        return dataclasses.replace(p, part_svt_scale=p.part_svt_scale / 2)

    monkeypatch.setattr(privacy_mod.PrivacyPlan, "build", classmethod(build))


def _broken_only_on_arrivals(monkeypatch):
    """The part sparse vector tested only at ticks with arrivals (its firing times would tell them)."""
    orig = mr_mod.EpochMergeReduce.step

    def step(self, tick, x, ring, f, count=None):
        if len(x) == 0 and self.psvt is not None:
            psvt, self.psvt = self.psvt, None
            try:
                return orig(self, tick, x, ring, f, count)
            finally:
                self.psvt = psvt
        return orig(self, tick, x, ring, f, count)

    monkeypatch.setattr(mr_mod.EpochMergeReduce, "step", step)


@pytest.mark.parametrize("name", ["half_scale", "only_on_arrivals"])
def test_audit_catches_broken_part_sparse_vectors(monkeypatch, name):
    {"half_scale": _broken_half_scale, "only_on_arrivals": _broken_only_on_arrivals}[name](monkeypatch)
    seen, p, n = _audit_fires(monkeypatch)
    with pytest.raises(AssertionError):
        check_rate(seen, p, n)
