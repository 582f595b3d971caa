"""Reading releases back: ``read_releases`` and ``ReleaseModel`` (predictions from one release).

A release (one per tick: ``releases.jsonl`` of the Beam job, the messages of its
output Pub/Sub topic, or ``DPStreamClusterer.release_.to_dict()``) is DP, so
anything computed from it alone is post-processing and DP too. This module needs
no Beam and no raw data::

    from dpstream import read_releases, DPStreamClusterer

    releases = list(read_releases("out/releases.jsonl"))   # or "out/", or "runs/*/releases.jsonl"
    model = DPStreamClusterer.from_release(releases[-1])   # a ReleaseModel
    labels = model.predict(X)                              # index of the nearest released center
    dist = model.transform(X)                              # (n, k) distances to the centers
    model.score(X)                                         # −cost (sklearn's convention: higher is better)

The model object built here holds only the release (public); a fitted
``DPStreamClusterer`` is operator state and must never be published (README).
"""
from __future__ import annotations

import glob as _glob
import json
import os
from typing import Iterator, List, Optional, Union

import numpy as np

from .params import objective_exponent
from .release import Release
from .release_log import resolve
from .rings import nearest_center

OBJECTIVES = ("kmeans", "kmedian")


def _paths(path_or_glob: Union[str, os.PathLike]) -> List[str]:
    p = os.fspath(path_or_glob)
    if "://" in p:  # gs://… and the like, through Beam's filesystems when Beam is installed
        try:
            from apache_beam.io.filesystems import FileSystems
        except ImportError:
            raise ValueError(f"reading {p} needs apache_beam's filesystems (pip install 'dpstream[gcp]')") from None
        found = sorted(m.path for m in FileSystems.match([p])[0].metadata_list)
        if not found:
            raise FileNotFoundError(f"{p} matches no file")
        return found
    if os.path.isdir(p):
        p = os.path.join(p, "releases.jsonl")
    if any(ch in p for ch in "*?["):
        found = sorted(q for q in _glob.glob(p) if os.path.isfile(q))
        if not found:
            raise FileNotFoundError(f"{p} matches no file")
        return found
    if not os.path.exists(p):
        raise FileNotFoundError(f"no release file {p}")
    return [p]


def _read_text(path: str) -> str:
    if "://" in path:
        from apache_beam.io.filesystems import FileSystems
        with FileSystems.open(path, compression_type="uncompressed") as fh:
            return fh.read().decode("utf-8")
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def read_releases(path_or_glob: Union[str, os.PathLike]) -> Iterator[Release]:
    """Yield the :class:`Release` objects saved in JSON-lines files (one release per line).

    ``path_or_glob``: a ``releases.jsonl`` file, the job's ``--output`` directory, a glob such as
    ``runs/*/releases.jsonl``, or a ``gs://`` path (with Beam installed). Files are read in sorted
    name order and each file's releases are yielded in (run, tick) order. A line that is not a release
    raises ValueError naming the file and line. A release log's references to an earlier tick's
    coreset and its coreset points named by id (:mod:`dpstream.release_log`) are resolved within the
    file: every release comes back whole. A file that lacks lines its others refer to (a job that
    stopped mid-write, a piece of a file) raises ValueError saying so."""
    for path in _paths(path_or_glob):
        dicts, numbers = [], []
        text = _read_text(path)
        lines = text.splitlines()
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                dicts.append(json.loads(line))
            except ValueError as e:  # JSONDecodeError is a ValueError
                cut = " (the file ends inside it: a write cut short)" if i == len(lines) and \
                    not text.endswith("\n") else ""
                raise ValueError(f"{path}, line {i}: not a dpstream release{cut} ({e})") from None
            numbers.append(i)
        rels = []
        for j, d in resolve(dicts, f"{path}: "):
            try:
                rels.append(Release.from_dict(d))
            except ValueError as e:
                raise ValueError(f"{path}, line {numbers[j]}: not a dpstream release ({e})") from None
        rels.sort(key=lambda r: (r.run, r.tick))
        yield from rels


class ReleaseModel:
    """Predictions from one release: ``predict``, ``transform``, ``score`` (scikit-learn's names).

    Built from public data only (the release's centers), so it may be shipped to any consumer.
    ``objective`` says how ``score`` measures cost: ``"kmeans"`` (Σ squared distances) or
    ``"kmedian"`` (Σ distances); it defaults to the release's own ``objective`` field when it has
    one, else ``"kmeans"``. It cannot be fitted further: a new release makes a new model."""

    def __init__(self, release: Union[Release, dict], objective: Optional[str] = None):
        if isinstance(release, dict):
            release = Release.from_dict(release)
        if not isinstance(release, Release):
            raise ValueError(f"expected a dpstream Release or its dict, got {type(release).__name__}")
        if objective is None:
            objective = getattr(release, "_extra", {}).get("objective") or getattr(release, "objective", None) \
                or "kmeans"
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        centers = np.asarray(release.centers, dtype=np.float64)
        if centers.ndim != 2 or centers.shape[0] < 1:
            raise ValueError(f"the release holds no centers (shape {centers.shape})")
        self.release_ = release
        self.cluster_centers_ = centers
        self.n_clusters = centers.shape[0]
        self.n_features_in_ = centers.shape[1]
        self.objective = objective
        self.privacy_plan_ = release.plan
        self.tick_ = release.tick

    @classmethod
    def from_release(cls, release: Union[Release, dict], objective: Optional[str] = None) -> "ReleaseModel":
        return cls(release, objective)

    def _check(self, X) -> np.ndarray:
        try:
            arr = np.asarray(X, dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise ValueError(f"X must be a numeric array of shape (n, {self.n_features_in_}): {e}") from None
        if arr.ndim != 2 or arr.shape[1] != self.n_features_in_:
            raise ValueError(f"X must have shape (n, {self.n_features_in_}), got {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise ValueError("X contains NaN or infinite values")
        return arr

    def predict(self, X) -> np.ndarray:
        """Index of the nearest released center for each row of X."""
        return nearest_center(self._check(X), self.cluster_centers_)[0]

    def transform(self, X) -> np.ndarray:
        """Euclidean distances (n, k) from each row of X to each released center."""
        X = self._check(X)
        d2 = (X ** 2).sum(axis=1)[:, None] - 2.0 * X @ self.cluster_centers_.T \
            + (self.cluster_centers_ ** 2).sum(axis=1)[None, :]
        return np.sqrt(np.maximum(d2, 0.0))

    def score(self, X, y=None) -> float:
        """Minus the cost of X under the released centers (higher is better, as in scikit-learn):
        −Σ min squared distance for k-means, −Σ min distance for k-median."""
        dist = nearest_center(self._check(X), self.cluster_centers_)[1]
        return -float((dist ** objective_exponent(self.objective)).sum())

    def __repr__(self) -> str:
        return f"ReleaseModel(tick={self.tick_}, k={self.n_clusters}, d={self.n_features_in_}, " \
               f"objective={self.objective!r})"
