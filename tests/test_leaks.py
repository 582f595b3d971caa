"""What may leave through the release channel, and what stays operator telemetry (P11, P14, P18).

* A unique canary point inserted at several positions of a stream never appears
  verbatim (nor within 1e-9) in any released coreset point or center.
* Every released weight is an integer: int dtype and JSON integers.
* A release dict has exactly the fields ``dpstream.release.RELEASE_FIELDS``.
* Operator telemetry — the exact number of points read and of points clipped —
  never enters a release, and ``count_estimate`` is a noisy estimate, not the count.

Each scanner is shown to catch a deliberately leaky engine.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import dpstream.engine as engine_mod
import dpstream.release as release_mod
import dpstream.semicoresets as sc_mod
from dpstream import DPStreamClusterer, Engine, EngineConfig
from dpstream.release import RELEASE_FIELDS
from dpstream.semicoresets import WeightedSet

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")



SEED = bytes(range(100, 132))
CANARIES = np.array([[0.123456789, 7.3217654321],
                     [-2.9182736455, 1.0987654321]])
N_TICKS = 16


def _cfg(**kw):
    base = dict(n_clusters=3, dim=2, radius=10.0, epsilon=1.0, delta=1e-6, horizon_ticks=N_TICKS,
                grid_levels=3, block_size=100, n_rings=6, tree_depth=4)
    base.update(kw)
    return EngineConfig(**base)


def _stream_with_canaries(n_ticks=N_TICKS, per_tick=120, at=(1, 6, 11, 16), copies=3, seed=3):
    rng = np.random.default_rng(seed)
    means = np.array([[4.0, 4.0], [-4.0, 3.0], [0.0, -5.0]])
    ticks = []
    for t in range(1, n_ticks + 1):
        P = means[rng.integers(0, 3, per_tick)] + rng.normal(scale=0.7, size=(per_tick, 2))
        if t in at:
            P = np.r_[P, np.repeat(CANARIES, copies, axis=0)]
            rng.shuffle(P)
        ticks.append(P)
    return ticks


def _releases(cfg, ticks, seed=SEED):
    e = Engine(cfg, seed)
    return e, [e.step(P) for P in ticks]


NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _numbers(obj):
    """Every number in a JSON-like object (bools excluded)."""
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _numbers(v)


def assert_no_canary(rel_dict):
    text = json.dumps(rel_dict)
    tokens = set(NUMBER.findall(text))
    for c in CANARIES.ravel():
        assert repr(float(c)) not in tokens, f"canary coordinate {c!r} released verbatim"
    for field in ("coreset_points", "centers"):
        pts = np.asarray(rel_dict[field], dtype=float).reshape(-1, 2)
        if pts.size:
            d = np.abs(pts[:, None, :] - CANARIES[None, :, :]).max(axis=2)
            assert d.min() > 1e-9, f"a canary point is in {field}"


def assert_integer_weights(rel, rel_dict):
    assert rel.coreset_weights.dtype.kind in "iu", f"weights dtype {rel.coreset_weights.dtype}"
    assert all(type(w) is int for w in rel_dict["coreset_weights"])
    text = json.dumps(rel_dict["coreset_weights"])
    assert re.fullmatch(r"\[(-?\d+(, -?\d+)*)?\]", text), f"non-integer JSON weights: {text[:80]}"


def assert_fields(rel_dict):
    assert tuple(rel_dict) == tuple(RELEASE_FIELDS), f"release fields {tuple(rel_dict)} != {RELEASE_FIELDS}"


def assert_no_telemetry(rel_dict, forbidden):
    """No number in the release (nor a numeric token of its JSON) equals an exact telemetry count."""
    nums = list(_numbers(rel_dict))
    for v in forbidden:
        assert not any(x == v for x in nums), f"telemetry value {v} appears in a release"
        tokens = NUMBER.findall(json.dumps(rel_dict))
        assert not any(float(tok) == v for tok in tokens), f"telemetry value {v} appears in the release JSON"
    text = json.dumps(rel_dict).lower()
    for word in ("n_clipped", "n_points", "clipped", "dead_letter"):
        assert word not in text, f"telemetry field name {word!r} in a release"


# -- tests --------------------------------------------------------------------------------

@pytest.mark.parametrize("semicoreset", ["tree", "lloyd", "snap"])
def test_canary_never_released(semicoreset):
    e, rels = _releases(_cfg(semicoreset=semicoreset), _stream_with_canaries())
    assert len(rels) == N_TICKS and e.epoch >= 1
    for rel in rels:
        d = rel.to_dict()
        assert_no_canary(d)
        assert_integer_weights(rel, d)
        assert_fields(d)
    assert rels[-1].coreset_weights.sum() > 0  # the check ran on a non-trivial release


def test_release_fields_and_integer_weights_through_the_api():
    X = np.concatenate(_stream_with_canaries())
    m = DPStreamClusterer(3, epsilon=1.0, radius=10.0, random_state=0, tick_size=150, grid_levels=3,
                          block_size=100, n_rings=6).fit(X)
    d = m.release_.to_dict()
    assert_fields(d)
    assert_integer_weights(m.release_, d)
    assert_no_canary(d)
    assert json.loads(json.dumps(d)) == d  # plain JSON


def _telemetry_stream(seed=5):
    """7777 far-away points (all clipped) among 4321 ordinary ones: distinctive exact counts."""
    rng = np.random.default_rng(seed)
    inside = rng.normal(scale=1.0, size=(4321, 2)) + [2.0, -1.0]
    ang = rng.uniform(0, 2 * np.pi, 7777)
    far = np.c_[np.cos(ang), np.sin(ang)] * rng.uniform(50, 500, (7777, 1))
    X = np.r_[inside, far]
    rng.shuffle(X)
    return X


def test_telemetry_never_in_a_release():
    X = _telemetry_stream()
    ticks = np.array_split(X, N_TICKS)
    e = Engine(_cfg(), SEED)
    seen = 0
    n_equal = 0
    for P in ticks:
        rel = e.step(P)
        seen += len(P)
        d = rel.to_dict()
        assert_fields(d)
        assert_no_telemetry(d, forbidden=[7777, X.shape[0], seen, e.n_clipped])
        n_equal += rel.count_estimate == seen
    assert e.n_clipped == 7777 and e.n_points == X.shape[0] == 12098
    assert n_equal == 0, "count_estimate equals the exact count: it must be a noisy estimate"


def test_api_telemetry_goes_to_n_clipped_only():
    X = _telemetry_stream()
    m = DPStreamClusterer(3, epsilon=1.0, radius=10.0, random_state=0, tick_size=800, grid_levels=3,
                          block_size=100, n_rings=6).fit(X)
    assert m.n_clipped_ == 7777
    d = m.release_.to_dict()
    assert_no_telemetry(d, forbidden=[7777, 12098])
    assert m.release_.count_estimate != 12098
    # the estimate is still an estimate of the count (not noise only): within a few noise std
    assert abs(m.release_.count_estimate - 12098) < 0.5 * 12098


# -- leaky engines: the scanners must catch each -----------------------------------------

def _leak_raw_points_from_a(monkeypatch):
    """A block that also keeps its raw points, and an A that releases them with its output."""
    import dpstream.blocks as blocks_mod

    orig_add, orig_release = blocks_mod.LeafSketch.add, sc_mod.Semicoreset.release

    def add(self, x, part):
        self.__dict__.setdefault("leak", []).append(np.array(x, dtype=float))
        return orig_add(self, x, part)

    def release(self, block, key, *a):
        out = orig_release(self, block, key, *a)
        x = np.concatenate(block.__dict__.get("leak", [np.zeros((0, self.cfg.dim))]))
        return WeightedSet.concat([out, WeightedSet(x, np.ones(len(x), dtype=np.int64),
                                                    np.zeros(len(x), dtype=np.int64))], self.cfg.dim)

    monkeypatch.setattr(blocks_mod.LeafSketch, "add", add)
    monkeypatch.setattr(sc_mod.Semicoreset, "release", release)


def test_canary_scan_catches_a_leaky_semicoreset(monkeypatch):
    _leak_raw_points_from_a(monkeypatch)
    cfg = _cfg(coreset_size=100_000)  # B passes everything through, as it does for small sets
    _, rels = _releases(cfg, _stream_with_canaries())
    with pytest.raises(AssertionError, match="canary"):
        for rel in rels:
            assert_no_canary(rel.to_dict())


def test_weight_scan_catches_float_weights(monkeypatch):
    orig = release_mod.Release.to_dict

    def to_dict(self):
        d = orig(self)
        d["coreset_weights"] = [float(w) + 0.25 for w in self.coreset_weights]
        return d

    monkeypatch.setattr(release_mod.Release, "to_dict", to_dict)
    _, rels = _releases(_cfg(), _stream_with_canaries(n_ticks=4, at=(2,)) + [np.zeros((0, 2))] * 12)
    with pytest.raises(AssertionError):
        assert_integer_weights(rels[-1], rels[-1].to_dict())
    # and an engine that kept B's float weights unrounded
    monkeypatch.undo()
    rel = rels[-1]
    bad = release_mod.Release(rel.tick, rel.epoch, rel.centers, rel.coreset_points,
                              rel.coreset_weights.astype(float) * 1.5, rel.count_estimate,
                              rel.n_candidate_centers, rel.plan)
    with pytest.raises(AssertionError):
        assert_integer_weights(bad, bad.to_dict())


def test_telemetry_scan_catches_exact_count_and_extra_field(monkeypatch):
    X = _telemetry_stream()
    ticks = np.array_split(X, 4)
    cfg = _cfg(horizon_ticks=4)
    # (a) count_estimate replaced by the exact count
    orig = engine_mod.Engine._release
    monkeypatch.setattr(engine_mod.Engine, "_release", lambda self, t, c: orig(self, t, float(self.n_points)))
    e = Engine(cfg, SEED)
    rels = [e.step(P) for P in ticks]
    with pytest.raises(AssertionError, match="telemetry value"):
        assert_no_telemetry(rels[-1].to_dict(), forbidden=[7777, X.shape[0]])
    monkeypatch.undo()
    # (b) an extra telemetry field in the release record
    orig_d = release_mod.Release.to_dict
    monkeypatch.setattr(release_mod.Release, "to_dict", lambda self: dict(orig_d(self), n_clipped=7777))
    e = Engine(cfg, SEED)
    d = [e.step(P) for P in ticks][-1].to_dict()
    with pytest.raises(AssertionError):
        assert_fields(d)
    with pytest.raises(AssertionError):
        assert_no_telemetry(d, forbidden=[7777])
