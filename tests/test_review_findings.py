"""The engine's privacy invariants (docs/privacy.md), one test (or a few) each, each with a broken
variant it catches; the sections name the invariant.

P6  A is total over all parts (empty ones included): same draws, same candidates.
P3  public horizon: ticks 1..T release, tick T+1 raises ``HorizonExceeded``.
P1  fit() is a position clock: replace-one by default, reported in the plan.
P1  replace-one sensitivities: SVT ×2, Gaussian counters σ ×√2, A sums 2 vs 1.
P11 integer noise on every released count.
P16 the seed: OS entropy by default, warnings for int seeds, nothing seed-derived released, never the seed.
P7  raw points stay raw until A (a block holds exactly the statistics A reads); no memory guard
    triggers a release.
P8  ring assignment uses the epoch's adopted (released) centers, not the latest F.
P10 cell ids fit the calibrated bit width, also on the ball's boundary.
P14 empty parts add no phantom mass.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import math
import warnings

import numpy as np
import pytest

import broken_variants  # tests/broken_variants.py (tests/ is on sys.path under pytest)

import dpstream.engine as engine_mod
from dpstream import rules
import dpstream.merge_reduce as mr_mod
import dpstream.semicoresets as sc_mod
from dpstream import DPStreamClusterer, Engine, EngineConfig, UnsafeSeedWarning
from dpstream.counters import BinaryMechanism, HorizonExceeded
from dpstream.grids import ShiftedGrids
from dpstream.noise import SECRET_SEED, TEST_SEED, NoiseSource
from dpstream.params import EngineConfig as _EC
from dpstream.privacy import PrivacyPlan
from dpstream.semicoresets import make_semicoreset

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")

SEED = bytes(range(64, 96))


def _cfg(**kw):
    base = dict(n_clusters=2, dim=2, radius=10.0, epsilon=1.0, delta=1e-6, horizon_ticks=16, grid_levels=3,
                block_size=150, n_rings=6, tree_depth=4, bicriteria=True, privacy_split=(0.1, 0.05, 0.85))
    base.update(kw)
    return EngineConfig(**base)


def _stream(n_ticks=16, per_tick=120, seed=2):
    rng = np.random.default_rng(seed)
    means = np.array([[4.0, 4.0], [-4.0, 3.0], [1.0, -5.0]])
    return [means[rng.integers(0, 3, per_tick)] + rng.normal(scale=0.5, size=(per_tick, 2)) for _ in range(n_ticks)]


_a_skips_empty_parts = broken_variants.a_skips_empty_parts


# =========================== P6: A is a total function ===================================

_PLANS = {}


def _plan(cfg):
    """PrivacyPlan.build is a pure function of cfg (~0.5-1 s): built once per cfg for the A probes."""
    if cfg not in _PLANS:
        _PLANS[cfg] = PrivacyPlan.build(cfg)
    return _PLANS[cfg]


def a_draws(semicoreset, x, part, n_parts, seed=SEED, **kw):
    """Noise keys drawn and output rows of one A call on a block."""
    cfg = _cfg(semicoreset=semicoreset, **kw)
    plan = _plan(cfg)
    noise = NoiseSource(seed, trace=True)
    A = make_semicoreset(cfg, plan, noise)
    centers = np.zeros((n_parts, 2)) + np.arange(n_parts)[:, None]
    radii = np.full(n_parts, 2.0)
    out = A(np.asarray(x, float).reshape(-1, 2), np.asarray(part, np.int64), centers, radii, ("A", 0, 1, "fire"))
    return noise.keys, out


def check_a_total(semicoreset, **kw):
    n_parts = 6
    empty_keys, _ = a_draws(semicoreset, np.zeros((0, 2)), np.zeros(0), n_parts, **kw)
    # one point in part 4 only; then points in every part but 1
    rng = np.random.default_rng(0)
    for parts in ([4], [0, 2, 3, 4, 5, 0, 0, 3]):
        parts = np.array(parts)
        x = parts[:, None] + rng.uniform(-0.5, 0.5, size=(parts.size, 2))
        keys, _ = a_draws(semicoreset, x, parts, n_parts, **kw)
        assert keys == empty_keys, f"{semicoreset}: A's draws depend on which parts are empty"
    # every part gets its root-level count draw, empty or not (one array in part order)
    counts = [size for (key, size) in empty_keys if "count" in key]
    assert counts and max(counts) >= n_parts


@pytest.mark.parametrize("semicoreset", ["tree", "lloyd", "snap"])
def test_a_draws_do_not_depend_on_empty_parts(semicoreset):
    check_a_total(semicoreset)


@pytest.mark.parametrize("semicoreset", ["snap", "lloyd"])
def test_a_candidates_are_data_independent(semicoreset):
    """Before the public weight threshold, A yields n_parts (snap) or n_parts·k (lloyd) candidates."""
    cfg = _cfg(semicoreset=semicoreset)
    A = make_semicoreset(cfg, _plan(cfg), NoiseSource(SEED))
    per = 1 if semicoreset == "snap" else cfg.n_clusters
    for n in (0, 1, 50):
        x = np.random.default_rng(n).uniform(-0.5, 0.5, size=(n, 2))
        block = A.open_block(np.zeros((5, 2)), np.ones(5), ("A", 0, n, 0))
        block.add(x, np.zeros(n, dtype=np.int64))
        out = A.run(block, ("A", 0, n, 0))
        assert len(out) == 5 * per
        np.testing.assert_array_equal(np.sort(out.part), np.repeat(np.arange(5), per))


def _spy_releases(monkeypatch):
    """Log (tick, epoch, ring, parts of the block, the epoch's |centers|, why) of every A release."""
    seen = []
    orig_release, orig_flush = mr_mod.RingMergeReduce.release_block, mr_mod.EpochMergeReduce.flush
    state = {"why": "fire"}

    def release_block(self, tick, *a):
        seen.append((tick, self.epoch, self.ring, self.block.n_parts, self.centers.shape[0], state["why"],
                     int(self.block.n)))
        return orig_release(self, tick, *a)

    def flush(self, tick, *a):
        state["why"] = "flush"
        try:
            return orig_flush(self, tick, *a)
        finally:
            state["why"] = "fire"

    monkeypatch.setattr(mr_mod.RingMergeReduce, "release_block", release_block)
    monkeypatch.setattr(mr_mod.EpochMergeReduce, "flush", flush)
    return seen


@pytest.mark.parametrize("defaults", [False, True])
def test_engine_calls_a_on_every_part(monkeypatch, defaults):
    """Every A release covers every center of its epoch (empty parts included); a flush releases
    every ring; a ring releases at most once per tick."""
    seen = _spy_releases(monkeypatch)
    cfg = (_cfg(horizon_ticks=16) if not defaults else
           EngineConfig(n_clusters=2, dim=2, radius=10.0, epsilon=1.0, horizon_ticks=16, block_size=150))
    e = Engine(cfg, SEED)
    for P in _stream():
        e.step(P)
    assert any(w == "flush" for *_, w, _ in seen) and any(w == "fire" for *_, w, _ in seen)
    for tick, epoch, ring, n_parts, nF, why, n in seen:
        assert n_parts == nF
    by_tick = {}
    for tick, epoch, ring, *_rest in seen:
        by_tick.setdefault((tick, epoch), []).append(ring)
    for (tick, epoch), rings in by_tick.items():
        assert len(set(rings)) == len(rings), f"a ring released twice at tick {tick}"
        if any(w == "flush" for t, ep, _, _, _, w, _ in seen if t == tick and ep == epoch):
            assert sorted(rings) == list(range(cfg.n_rings)), "a flush skipped rings"
    assert max(nF for _, _, _, _, nF, _, _ in seen) > 1  # parts per ring really varied with |F|


def test_check_catches_a_skipping_empty_parts(monkeypatch):
    _a_skips_empty_parts(monkeypatch)
    for semicoreset in ("tree", "lloyd", "snap"):
        with pytest.raises(AssertionError):
            check_a_total(semicoreset)


# =========================== P3: public horizon =========================================

def check_horizon(make_engine, T):
    e = make_engine()
    rng = np.random.default_rng(0)
    ticks = []
    for t in range(1, T + 1):
        n = 0 if t % 3 == 0 else 40  # empty ticks release too
        rel = e.step(rng.normal(size=(n, 2)))
        ticks.append(rel.tick)
    assert ticks == list(range(1, T + 1))
    try:
        e.step(rng.normal(size=(10, 2)))
    except HorizonExceeded:
        pass
    else:
        raise AssertionError(f"tick {T + 1} past the horizon T={T} was not refused")
    assert e.t == T
    try:  # still refused, also for an empty tick
        e.step(np.zeros((0, 2)))
    except HorizonExceeded:
        pass
    else:
        raise AssertionError("an empty tick past the horizon was not refused")


@pytest.mark.parametrize("bicriteria", [True, False])
def test_horizon_fails_closed(bicriteria):
    T = 9
    check_horizon(lambda: Engine(_cfg(horizon_ticks=T, bicriteria=bicriteria), SEED), T)


def test_counter_fails_closed_on_its_own():
    bm = BinaryMechanism(4, 5, NoiseSource(SEED), ("c",), "gaussian", 1.0)
    for _ in range(5):
        bm.step(np.ones(4, dtype=np.int64))
    with pytest.raises(HorizonExceeded):
        bm.step(None)


def test_check_catches_an_engine_without_horizon():
    T = 9

    for bicriteria in (True, False):
        def make():
            e = Engine(_cfg(horizon_ticks=T, bicriteria=bicriteria, privacy_split=(0.1, 0.05, 0.8, 0.05)), SEED)
            object.__setattr__(e.cfg, "stream", dataclasses.replace(e.cfg.stream, horizon_ticks=10 * T))  # guard lifted ...
            (e.bic if bicriteria else e).counter.horizon = 10 * T  # ... in the engine and in its counters
            return e

        with pytest.raises(AssertionError, match="not refused"):
            check_horizon(make, T)


def test_one_release_per_call_with_public_ticks():
    m = DPStreamClusterer(2, epsilon=1.0, radius=10.0, random_state=0, horizon_ticks=12, grid_levels=3,
                          n_rings=6, block_size=100)
    rng = np.random.default_rng(1)
    ticks = []
    for t in range(12):
        n = [0, 5, 300][t % 3]
        m.partial_fit(rng.normal(size=(n, 2)))
        ticks.append(m.release_.tick)
    assert ticks == list(range(1, 13)) and m.n_ticks_ == 12
    with pytest.raises(HorizonExceeded):
        m.partial_fit(rng.normal(size=(3, 2)))


# =========================== P1: fit is a position clock ================================

def test_fit_defaults_to_replace_one():
    X = np.random.default_rng(0).normal(size=(1000, 2))
    m = DPStreamClusterer(2, epsilon=1.0, radius=5.0, random_state=0, tick_size=250, grid_levels=3)
    assert m.get_params()["neighbouring"] == "replace_one"
    m.fit(X)
    assert m.privacy_plan_.neighbouring == "replace_one"
    assert m.release_.to_dict()["privacy"]["neighbouring"] == "replace_one"
    assert "replace_one" in m.privacy_plan_.table()
    # and the plan is calibrated for it
    ref = PrivacyPlan.build(m.engine_.cfg.with_(neighbouring="replace_one"))
    assert m.privacy_plan_.svt_scale == ref.svt_scale


def test_fit_refuses_add_remove():
    """fit() makes ticks by counting rows (a position clock) and takes T from len(X): under
    add/remove one added row shifts every later row into another tick and can add a tick,
    so the guarantee the plan states for 'add_remove' does not hold (P3, P1).
    fit must refuse it (partial_fit with event-time ticks is the add/remove path)."""
    X = np.random.default_rng(0).normal(size=(1000, 2))
    m = DPStreamClusterer(2, epsilon=1.0, radius=5.0, random_state=0, tick_size=250, grid_levels=3,
                          neighbouring="add_remove")
    with pytest.raises(ValueError, match="add_remove|position|replace_one"):
        m.fit(X)


# =========================== P1: replace-one factors ====================================

def check_replace_factors(build):
    for delta, kind in ((1e-6, "gaussian"), (0.0, "pure")):
        for semi in ("tree", "lloyd"):
            cfg = _cfg(delta=delta, semicoreset=semi, n_trees=2, n_reps=2)
            rp = build(cfg.with_(neighbouring="replace_one"))
            ar = build(cfg.with_(neighbouring="add_remove"))
            assert rp.svt_scale == pytest.approx(2 * ar.svt_scale), "SVT scale must double"
            f_hist = math.sqrt(2) if kind == "gaussian" else 2.0
            for lv in ar.bic_scale:
                assert rp.bic_scale[lv] == pytest.approx(f_hist * ar.bic_scale[lv]), "bicriteria counters"
            assert rp.a_count_scale == pytest.approx(f_hist * ar.a_count_scale), "A counts (two parts)"
            # sums of points within one part: ‖x − x'‖ ≤ 2 in the unit ball, not √2
            assert rp.a_sum_scale == pytest.approx(2.0 * ar.a_sum_scale), "A sums (same part)"
            sens = {ln.component: ln.sensitivity for ln in rp.lines}
            sens_ar = {ln.component: ln.sensitivity for ln in ar.lines}
            s_sum = [c for c in sens if "sums" in c][0]
            assert sens[s_sum] == pytest.approx(2 * sens_ar[s_sum])


def test_replace_one_noise_scales():
    check_replace_factors(PrivacyPlan.build)


def test_check_catches_a_plan_without_replace_factors(monkeypatch):
    monkeypatch.setattr(_EC, "replace", property(lambda self: False))
    with pytest.raises(AssertionError):
        check_replace_factors(PrivacyPlan.build)


# =========================== P11: integer noise ==========================================

def check_integer_counts(semicoreset):
    cfg = _cfg(semicoreset=semicoreset)
    noise = NoiseSource(SEED)
    A = make_semicoreset(cfg, _plan(cfg), noise)
    counts = np.array([0, 3, 17, 2500, 10000])  # large parts survive the public weight threshold
    noisy = A.noisy_counts(("A", 0, 1, "probe"), counts, np.arange(counts.size))
    assert noisy.dtype.kind == "i", f"noisy counts have dtype {noisy.dtype}"
    assert np.all((noisy - counts) == np.round(noisy - counts))
    assert np.any(noisy != counts)  # there is noise
    # the weights A outputs are integers, and for snap they are count + integer noise
    rng = np.random.default_rng(0)
    part = np.repeat(np.arange(5), counts)
    x = part[:, None] + rng.uniform(-0.5, 0.5, size=(part.size, 2))
    out = A(x, part, np.c_[np.arange(5.0), np.arange(5.0)], np.full(5, 1.0), ("A", 0, 2, "fire"))
    assert out.weights.dtype.kind == "i" and len(out) > 0
    if semicoreset == "snap":
        diff = out.weights - counts[out.part]
        assert np.all(diff == np.round(diff))


@pytest.mark.parametrize("semicoreset", ["tree", "lloyd", "snap"])
def test_integer_noise_on_counts(semicoreset):
    check_integer_counts(semicoreset)


def test_released_weights_and_counters_are_integers():
    e = Engine(_cfg(delta=0.0), SEED)
    for P in _stream():
        rel = e.step(P)
        assert rel.coreset_weights.dtype.kind == "i"
        assert all(type(w) is int for w in rel.to_dict()["coreset_weights"])
    assert e.bic.counter.release().dtype.kind == "i"
    assert rel.coreset_weights.sum() > 0


def test_check_catches_float_noise(monkeypatch):
    monkeypatch.setattr(NoiseSource, "int_noise",
                        lambda self, key, size, mechanism, scale: self.gaussian(key, size, max(scale, 1.0)))
    for semicoreset in ("tree", "snap"):
        with pytest.raises(AssertionError):
            check_integer_counts(semicoreset)


# =========================== P16: the seed ===============================================

def _fit(random_state, X):
    return DPStreamClusterer(2, epsilon=1.0, radius=6.0, random_state=random_state, tick_size=300,
                             grid_levels=3, n_rings=6, block_size=100).fit(X)


def _x(n=1500):
    rng = np.random.default_rng(4)
    return np.r_[rng.normal(size=(n // 2, 2)) + 2, rng.normal(size=(n - n // 2, 2)) - 2]


def test_default_seed_is_fresh_entropy():
    X = _x()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnsafeSeedWarning)  # None must not warn
        a, b = _fit(None, X), _fit(None, X)
    assert a.privacy_plan_.to_dict()["seed"] == SECRET_SEED
    assert json.dumps(a.release_.to_dict()) != json.dumps(b.release_.to_dict())
    assert not np.array_equal(a.cluster_centers_, b.cluster_centers_)


def test_int_seed_warns_and_is_reproducible():
    X = _x()
    with pytest.warns(UnsafeSeedWarning):
        a = _fit(7, X)
    with pytest.warns(UnsafeSeedWarning):
        b = _fit(7, X)
    assert a.privacy_plan_.to_dict()["seed"] == TEST_SEED
    assert json.dumps(a.release_.to_dict()) == json.dumps(b.release_.to_dict())
    c = _fit(8, X)
    assert json.dumps(c.release_.to_dict()) != json.dumps(a.release_.to_dict())


def _seed_forms(seed: bytes):
    return [seed.hex(), seed.hex().upper(), base64.b64encode(seed).decode(), repr(seed)[2:-1],
            str(list(seed))[1:-1], seed.decode("latin-1")]


def check_seed_not_released(m, seed: bytes):
    plan_d = m.privacy_plan_.to_dict()
    texts = [json.dumps(plan_d), json.dumps(m.release_.to_dict()), m.privacy_plan_.table(),
             json.dumps(m.release_.to_dict(), ensure_ascii=False)]
    assert plan_d["seed"] in (SECRET_SEED, TEST_SEED)
    for form in _seed_forms(seed):
        for t in texts:
            assert form not in t, "the master seed appears in a release or in the plan"


def test_the_plan_names_the_kind_of_seed_but_never_the_seed():
    seed = bytes.fromhex("8f3a9c1e5b7d2046a1c3e5f70819b2d4c6e8fa1c3e5a7b9d0f2a4c6e8b1d3f57")
    X = _x()
    m = _fit(seed, X)
    check_seed_not_released(m, seed)
    # an int seed: neither the derived bytes
    import hashlib
    m2 = _fit(12345, X)
    check_seed_not_released(m2, hashlib.sha256(b"dpstream-int-seed:12345").digest())
    assert m.privacy_plan_.to_dict()["seed"] == SECRET_SEED and m2.privacy_plan_.to_dict()["seed"] == TEST_SEED
    with pytest.raises(ValueError):
        _fit(b"too short", X)


def test_check_catches_a_seed_in_the_plan(monkeypatch):
    seed = bytes.fromhex("8f3a9c1e5b7d2046a1c3e5f70819b2d4c6e8fa1c3e5a7b9d0f2a4c6e8b1d3f57")
    orig = PrivacyPlan.to_dict
    monkeypatch.setattr(PrivacyPlan, "to_dict", lambda self: dict(orig(self), note=seed.hex()))
    m = _fit(seed, _x())
    with pytest.raises(AssertionError, match="master seed"):
        check_seed_not_released(m, seed)


# =========================== P7: raw buffer, no memory guard =============================

def _rows(a):
    a = np.asarray(a, dtype=float).reshape(-1, 2)
    return a[np.lexsort(a.T[::-1])]


def _expected_block(block, x, part):
    """The statistics a block must hold for raw points x with parts ``part``, recomputed here:
    per (part, leaf code) the exact count and the exact sum of trunc(2^b·(x − c_p)/r_p)."""
    y = (x - block.centers[part]) / block.radii[part][:, None]
    nrm = np.linalg.norm(y, axis=1)
    y = np.where((nrm > 1)[:, None], y / np.maximum(nrm, 1e-300)[:, None] / (1 + 1e-12), y)
    D = block.V.shape[0]
    code = sum((y @ block.V[l] >= 0).astype(np.int64) << (D - 1 - l) for l in range(D)) if D else 0
    key = (part.astype(np.int64) << D) + code
    q = np.trunc(y * block.grid).astype(np.int64)
    out = {}
    for kk in np.unique(key):
        sel = key == kk
        out[int(kk)] = (int(sel.sum()), q[sel].sum(axis=0) if block.with_sums else None)
    return out


def check_raw_buffer(cfg):
    """Without fires or epochs, every ring's level-0 block holds exactly what its points give:
    raw clipped points (DP-Lloyd) or their exact per-leaf counts and quantised sums (the tree)."""
    e = Engine(cfg, SEED)
    rng = np.random.default_rng(3)
    seen = {i: ([], []) for i in range(cfg.n_rings)}
    for t in range(6):
        P = rng.normal(scale=4.0, size=(200, 2))
        P[:10] *= 20  # some far points (clipped)
        e.step(P)
        c, _ = engine_mod.clip_to_ball(P.copy(), cfg.center_vec, cfg.radius)
        ring, f = e.last_ring, None
        from dpstream.rings import nearest_center
        f, _ = nearest_center(c, e.mr.centers)
        for i in range(cfg.n_rings):
            seen[i][0].append(c[ring == i])
            seen[i][1].append(f[ring == i])
        for i, r in enumerate(e.mr.rings):
            x, p = np.concatenate(seen[i][0]), np.concatenate(seen[i][1])
            b = r.block
            if hasattr(b, "compact"):
                keys, cnt, sums = b.compact()
                want = _expected_block(b, x, p)
                assert sorted(want) == keys.tolist(), f"ring {i}: the block's leaves are not the raw input's"
                for kk, c_, s_ in zip(keys.tolist(), cnt, sums):
                    assert want[kk][0] == c_, f"ring {i}: a leaf count is not the raw input's"
                    if b.with_sums:
                        np.testing.assert_array_equal(want[kk][1], s_, err_msg="block sums are not the raw input's")
            else:
                bx, _ = b.raw()
                np.testing.assert_array_equal(_rows(bx), _rows(x), err_msg="level-0 buffer is not the raw clipped input")


@pytest.mark.parametrize("semicoreset", ["tree", "lloyd", "snap"])
def test_block_holds_exactly_the_raw_clipped_points(semicoreset):
    check_raw_buffer(_cfg(block_size=1_000_000, bicriteria=False, ring_centers="bicriteria", horizon_ticks=8,
                          semicoreset=semicoreset, epoch_schedule="doubling"))


def check_burst(cfg, burst=30_000):
    """A burst in one tick: each ring's SVT fires at most once, releasing the ring's whole block;
    nothing else (no guard-triggered flush, no extra release) happens."""
    mp = pytest.MonkeyPatch()
    seen = _spy_releases(mp)
    try:
        e = Engine(cfg, SEED)
        rng = np.random.default_rng(5)
        rels = []
        for t in range(1, cfg.horizon_ticks + 1):
            n = burst if t == 3 else 20
            P = rng.normal(scale=3.0, size=(n, 2))
            epoch_before, last_flush = e.epoch, e.last_flush
            before = [r.block.n for r in e.mr.rings]
            rels.append(e.step(P))
            at_t = [c for c in seen if c[0] == t]
            rings_at_t = [c[2] for c in at_t]
            assert len(set(rings_at_t)) == len(rings_at_t), f"a ring released twice at tick {t}"
            fires = [c for c in at_t if c[5] == "fire"]
            for c in fires:
                assert c[6] >= before[c[2]]  # the whole block, uncut
            # a flush happens only at an epoch change, a public flush tick or the horizon
            if any(c[5] == "flush" for c in at_t):
                assert (e.epoch != epoch_before or t == cfg.horizon_ticks
                        or rules.flush_tick(t, last_flush, cfg.flush_schedule)), f"guard flush at tick {t}"
        assert [r.tick for r in rels] == list(range(1, cfg.horizon_ticks + 1))
        assert sum(c[6] for c in seen if c[0] == 3 and c[5] == "fire") >= burst // 2
    finally:
        mp.undo()


def test_burst_fires_at_most_once_per_ring():
    check_burst(_cfg(block_size=100, bicriteria=False, ring_centers="bicriteria", horizon_ticks=8))


def test_checks_catch_summarised_buffer(monkeypatch):
    orig = mr_mod.EpochMergeReduce.step

    def step(self, tick, x, ring, f, *a):  # a "memory saver": each block keeps only its 3 heaviest leaves
        out = orig(self, tick, x, ring, f, *a)
        for r in self.rings:
            k, c, sm = r.block.compact()
            top = np.sort(np.argsort(-c)[:3])
            r.block.keys, r.block.counts, r.block.sums = k[top], c[top], sm[top]
        return out

    monkeypatch.setattr(mr_mod.EpochMergeReduce, "step", step)
    with pytest.raises(AssertionError, match="raw"):
        check_raw_buffer(_cfg(block_size=1_000_000, bicriteria=False, ring_centers="bicriteria", horizon_ticks=8,
                              epoch_schedule="doubling"))


def test_checks_catch_a_memory_guard(monkeypatch):
    orig = mr_mod.EpochMergeReduce.step

    def step(self, tick, x, ring, f, *a):  # "if len(P_0) > cap: flush"
        out = orig(self, tick, x, ring, f, *a)
        if self.buffered() > 5000:
            self.flush(tick)
        return out

    monkeypatch.setattr(mr_mod.EpochMergeReduce, "step", step)
    with pytest.raises(AssertionError, match="guard flush|released twice"):
        check_burst(_cfg(block_size=10_000_000, bicriteria=False, ring_centers="bicriteria", horizon_ticks=8))


# =========================== P8: rings from the adopted centers ==========================

def _rings(x, centers, cfg):
    d = np.sqrt(((x[:, None, :] - centers[None, :, :]) ** 2).sum(axis=2)).min(axis=1)
    r0 = 2.0 * cfg.radius / 2.0 ** (cfg.n_rings - 1)
    with np.errstate(divide="ignore"):
        i = np.floor(np.log2(np.maximum(d, 1e-300) / r0)).astype(np.int64) + 1
    return np.clip(i, 0, cfg.n_rings - 1)


def check_rings_from_adopted_centers(e, ticks):
    cfg = e.cfg
    n_lagging = n_informative = 0
    prev_epoch = e.epoch
    for t, P in enumerate(ticks, 1):
        C = e.epoch_centers.copy()  # adopted at the epoch start
        F = e.candidate_centers().copy()  # released F of the previous tick
        prev_start = e.epoch_start
        e.step(P)
        x, _ = engine_mod.clip_to_ball(np.asarray(P, float).copy(), cfg.center_vec, cfg.radius)
        want = _rings(x, C, cfg)
        np.testing.assert_array_equal(e.last_ring, want, err_msg=f"tick {t}: rings not from the epoch's centers")
        if F.shape[0] > C.shape[0]:
            n_lagging += 1
            n_informative += int(np.any(_rings(x, F, cfg) != want))
        if e.epoch != prev_epoch:  # adoption only on the public schedule
            if cfg.epoch_schedule == "doubling":
                assert t >= max(1, 2 * prev_start), f"epoch adopted at tick {t}, before 2·{prev_start}"
            else:  # "horizon": the new epoch spans at least half the run
                assert 2 * t <= cfg.horizon_ticks, f"epoch adopted at tick {t} > T/2"
            prev_epoch = e.epoch
        else:  # between adoptions the epoch's centers never change
            np.testing.assert_array_equal(e.epoch_centers, C)
    return n_lagging, n_informative


@pytest.mark.parametrize("schedule", ["doubling", "horizon"])
def test_rings_use_the_epochs_adopted_centers(schedule):
    cfg = _cfg(horizon_ticks=32, ring_centers="bicriteria", epoch_schedule=schedule)
    e = Engine(cfg, SEED)
    lag, info = check_rings_from_adopted_centers(e, _stream(n_ticks=32))
    assert lag > 0 and info > 0, "the run never had F ahead of the epoch's centers: the test has no power"


def check_default_rings(e, ticks):
    """The default rule: an epoch's ring centers are the ball center and the k centers released at
    its adoption tick t (after that tick's flush: DP outputs of ticks ≤ t), applied from tick t + 1;
    between adoptions they never change."""
    cfg = e.cfg
    n_changes = 0
    for t, P in enumerate(ticks, 1):
        ep, C = e.epoch, e.epoch_centers.copy()
        rel = e.step(P)
        x, _ = engine_mod.clip_to_ball(np.asarray(P, float).copy(), cfg.center_vec, cfg.radius)
        np.testing.assert_array_equal(e.last_ring, _rings(x, C, cfg), err_msg=f"tick {t}: rings not from the "
                                                                             f"epoch's centers")
        if e.epoch != ep:
            n_changes += 1
            np.testing.assert_array_equal(e.epoch_centers, np.vstack([cfg.center_vec[None, :], rel.centers]),
                                          err_msg=f"tick {t}: the new rings are not the released centers")
        else:
            np.testing.assert_array_equal(e.epoch_centers, C)
    return n_changes


def test_default_rings_use_the_released_centers_adopted_at_the_epoch():
    cfg = EngineConfig(n_clusters=3, dim=2, radius=10.0, epsilon=1.0, horizon_ticks=32, block_size=150)
    assert check_default_rings(Engine(cfg, SEED), _stream(n_ticks=32)) >= 2


def test_check_catches_ring_centers_from_raw_points(monkeypatch):
    broken_variants.ring_centers_from_raw_points(monkeypatch)
    cfg = EngineConfig(n_clusters=3, dim=2, radius=10.0, epsilon=1.0, horizon_ticks=32, block_size=150)
    with pytest.raises(AssertionError, match="released centers"):
        check_default_rings(Engine(cfg, SEED), _stream(n_ticks=32))


def test_check_catches_assignment_from_latest_f(monkeypatch):
    orig = engine_mod.Engine.step

    def step(self, points):  # assign with "the latest F" instead of the adopted centers
        if self.bic is not None and self.bic.centers.shape[0] != self.mr.centers.shape[0]:
            self.mr.centers = self.bic.centers.copy()
        return orig(self, points)

    monkeypatch.setattr(engine_mod.Engine, "step", step)
    # without the part sparse vector: its instances, one per (ring, center) sized at the epoch's start, cannot
    # take a center count that changes mid-epoch (the broken engine stops there, before the check)
    e = Engine(_cfg(horizon_ticks=32, ring_centers="bicriteria", epoch_schedule="doubling", part_fire=0.0), SEED)
    # caught either by the rings themselves or by the epoch's centers changing between adoptions
    with pytest.raises(AssertionError, match="rings not from|shapes .* mismatch"):
        check_rings_from_adopted_centers(e, _stream(n_ticks=32))


# =========================== P10: cell ids fit their bits ================================

def boundary_points(center, radius, n=720):
    ang = np.linspace(0, 2 * np.pi, n, endpoint=False)
    c = np.asarray(center, float)
    ring = c + radius * np.c_[np.cos(ang), np.sin(ang)]
    axes = c + radius * np.array([[1, 0], [-1, 0], [0, 1], [0, -1]], float)
    far = c + 1e6 * radius * np.c_[np.cos(ang), np.sin(ang)]
    return np.r_[ring, axes, far]


def check_cell_ids(cfg, seed=SEED, through_engine=False):
    pts = boundary_points(cfg.center_vec, cfg.radius)
    if through_engine:
        e = Engine(cfg, seed)
        e.step(pts)  # the encoder asserts 0 <= id < 2^b itself
        grids = e.bic.grids
    else:
        grids = ShiftedGrids(cfg, NoiseSource(seed))
    x, _ = engine_mod.clip_to_ball(pts.copy(), cfg.center_vec, cfg.radius)
    xc = x - cfg.center_vec
    assert np.all(np.linalg.norm(xc, axis=1) <= cfg.radius * (1 + 1e-9))
    for q in range(cfg.n_trees):
        for lv in range(cfg.grid_levels):
            g = 2.0 * cfg.radius / 2.0 ** lv
            values = math.floor((cfg.radius + g) / g) - math.floor(-cfg.radius / g) + 1
            b = max(1, math.ceil(math.log2(values)))
            ids = grids.cell_ids(xc, q, lv)
            bits = grids.encode(ids, lv)
            assert bits.shape[1] == cfg.id_bits(lv)  # the width the noise is calibrated for
            np.testing.assert_array_equal(grids.decode(bits, lv), ids)
            assert ids.min() >= 0 and ids.max() < 2 ** b
            assert cfg.id_bits(lv) == cfg.dim * b


@pytest.mark.parametrize("radius,center", [(10.0, None), (3.7, (1.5, -2.0)), (1e-3, (123.456, 7.0)),
                                           (1e6, (-5e6, 2e6)), (1.0, (1e6, -3e5))])
def test_cell_ids_fit_on_the_boundary(radius, center):
    check_cell_ids(_cfg(radius=radius, center=center, grid_levels=8, n_trees=3, horizon_ticks=4),
                   through_engine=center is None)


def test_check_catches_the_notes_bit_width(monkeypatch):
    monkeypatch.setattr(_EC, "cell_bits", lambda self, lv: lv + 1)  # the naive b_ℓ = ℓ+1
    with pytest.raises(AssertionError):
        check_cell_ids(_cfg(grid_levels=4, horizon_ticks=4))
    with pytest.raises(AssertionError):
        check_cell_ids(_cfg(grid_levels=4, horizon_ticks=4), through_engine=True)


# =========================== P14: no phantom mass ========================================

def check_no_phantom_mass(semicoreset, T=48, **kw):
    cfg = _cfg(semicoreset=semicoreset, horizon_ticks=T, block_size=100, **kw)
    e = Engine(cfg, SEED)
    total = []
    for _ in range(T):
        total.append(int(e.step(np.zeros((0, 2))).coreset_weights.sum()))
    assert e.mr.fires >= 1 and (e.epoch >= 1 or cfg.epoch_schedule == "horizon")  # empty parts went through A
    bound = 3 * e.plan.a_count_scale
    assert max(total) <= bound, f"{semicoreset}: phantom mass {max(total)} from an empty stream (> {bound:.0f})"


@pytest.mark.parametrize("semicoreset", ["tree", "lloyd", "snap"])
@pytest.mark.parametrize("schedule", ["doubling", "horizon"])
def test_empty_stream_has_no_phantom_mass(semicoreset, schedule):
    check_no_phantom_mass(semicoreset, epoch_schedule=schedule, bicriteria=schedule == "doubling")


def test_check_catches_missing_threshold(monkeypatch):
    monkeypatch.setattr(sc_mod.Semicoreset, "count_tail", lambda self, n, run_wide=True, key=None: 0.5)
    monkeypatch.setattr(sc_mod.Semicoreset, "sum_noise_norm", lambda self, dim=None: 0.0)
    for semicoreset in ("tree", "lloyd", "snap"):
        with pytest.raises(AssertionError, match="phantom"):
            check_no_phantom_mass(semicoreset, epoch_schedule="doubling")
