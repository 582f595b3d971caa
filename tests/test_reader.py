"""Reading releases back: Release.from_dict, read_releases, and a model from a saved release."""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from dpstream import DPStreamClusterer, Release, ReleaseModel, ReleasedPlan, read_releases

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")


def _X(n=1500, seed=0):
    rng = np.random.default_rng(seed)
    means = np.array([[4.0, 4.0], [-4.0, 3.0], [1.0, -5.0]])
    return means[rng.integers(0, 3, n)] + rng.normal(scale=0.6, size=(n, 2))


@pytest.fixture(scope="module")
def fitted():
    return DPStreamClusterer(3, radius=10.0, random_state=0, tick_size=300, grid_levels=3, n_rings=6,
                             block_size=100, tree_depth=4).fit(_X())


def _dicts(m):
    """Every release of a run, through JSON (what releases.jsonl holds)."""
    return json.loads(json.dumps(m.release_.to_dict()))


def test_from_dict_is_the_inverse_of_to_dict(fitted):
    d = _dicts(fitted)
    rel = Release.from_dict(d)
    assert rel.to_dict() == d
    assert isinstance(rel.centers, np.ndarray) and rel.centers.shape == (3, 2)
    assert rel.coreset_points.shape[1] == 2 and rel.coreset_weights.dtype == np.int64
    assert isinstance(rel.plan, ReleasedPlan)
    assert rel.plan.total_epsilon == d["privacy"]["total_epsilon"] and rel.plan["neighbouring"] == "replace_one"
    assert "Privacy plan" in rel.plan.table() and "ε if this line ran alone" in str(rel.plan)


def test_from_dict_keeps_unknown_keys_and_defaults_missing_optional_ones(fitted):
    d = _dicts(fitted)
    newer = dict(d, run=2, ticks_of_run=[4, 5])  # fields a newer dpstream may write
    assert Release.from_dict(newer).to_dict() == newer

    @dataclass(frozen=True)
    class WithRun(Release):  # a Release that grew an optional field
        run: int = 0

    assert WithRun.from_dict(d).run == 0
    assert WithRun.from_dict(dict(d, run=3)).run == 3
    with pytest.raises(ValueError, match="'centers' is missing"):
        Release.from_dict({k: v for k, v in d.items() if k != "centers"})
    with pytest.raises(ValueError, match="a dict"):
        Release.from_dict([1, 2])


def test_read_releases_from_a_file_a_directory_and_a_glob(tmp_path, fitted):
    d = _dicts(fitted)
    lines = [dict(d, tick=t) for t in (3, 1, 2)]  # out of order on disk
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        (tmp_path / run / "releases.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert [r.tick for r in read_releases(tmp_path / "a" / "releases.jsonl")] == [1, 2, 3]
    assert [r.tick for r in read_releases(str(tmp_path / "a"))] == [1, 2, 3]
    assert [r.tick for r in read_releases(f"{tmp_path}/*/releases.jsonl")] == [1, 2, 3, 1, 2, 3]
    assert all(r.to_dict() == dict(d, tick=r.tick) for r in read_releases(tmp_path / "b"))
    (tmp_path / "bad.jsonl").write_text(json.dumps(d) + "\n{not json\n")
    with pytest.raises(ValueError, match="bad.jsonl, line 2"):
        list(read_releases(tmp_path / "bad.jsonl"))
    with pytest.raises(FileNotFoundError):
        list(read_releases(tmp_path / "none" / "*.jsonl"))


def test_a_model_from_a_saved_release_predicts_like_the_fitted_estimator(fitted):
    X = _X(400, seed=9)
    model = DPStreamClusterer.from_release(_dicts(fitted))
    assert isinstance(model, ReleaseModel) and model.tick_ == fitted.release_.tick
    np.testing.assert_array_equal(model.predict(X), fitted.predict(X))
    D = model.transform(X)
    assert D.shape == (400, 3)
    np.testing.assert_allclose(D, np.linalg.norm(X[:, None, :] - fitted.cluster_centers_[None], axis=2),
                               atol=1e-9)
    np.testing.assert_array_equal(D.argmin(axis=1), model.predict(X))
    assert model.score(X) == pytest.approx(-(D.min(axis=1) ** 2).sum())
    kmed = ReleaseModel.from_release(fitted.release_, objective="kmedian")
    assert kmed.score(X) == pytest.approx(-D.min(axis=1).sum())
    assert kmed.score(X) != pytest.approx(model.score(X))
    with pytest.raises(ValueError, match="shape"):
        model.predict(np.ones((3, 5)))
    with pytest.raises(ValueError, match="objective"):
        ReleaseModel(fitted.release_, objective="kmodes")
