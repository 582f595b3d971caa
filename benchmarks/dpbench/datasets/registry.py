"""The data-set registry and its types (the generators in this package register here)."""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

INORDER = "_inorder"


@dataclass
class Raw:
    """A generator's output (generator order) and its public rule."""
    X: np.ndarray
    y: Optional[np.ndarray]
    k: int
    tick: int
    radius: float
    center: np.ndarray
    bounds: Tuple[np.ndarray, np.ndarray]
    rule: str
    meta: Dict = field(default_factory=dict)


@dataclass
class Spec:
    name: str
    family: str
    make: Callable[[], Raw]
    held_out: bool = False  # never run while the engine was tuned (see the README)
    grid: bool = True  # in the default grid (with its in-order variant)
    kmedian: bool = False  # in the default k-median set
    about: str = ""


@dataclass
class Dataset:
    """A stream to run: ``source``'s points in one order, and its public rule (read through)."""
    name: str
    base: str
    order: str  # "shuffled" | "inorder" (sorted by label) | "natural" (no labels: the source's order)
    X: np.ndarray
    y: Optional[np.ndarray]
    source: Raw  # the generator's output (generator order): k, tick, radius, center, bounds, rule, meta
    family: str
    held_out: bool

    k = property(lambda self: self.source.k)
    tick = property(lambda self: self.source.tick)
    radius = property(lambda self: float(self.source.radius))
    center = property(lambda self: np.asarray(self.source.center, dtype=float))
    bounds = property(lambda self: self.source.bounds)
    rule = property(lambda self: self.source.rule)
    meta = property(lambda self: dict(self.source.meta))

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[1]

    @property
    def T(self) -> int:
        return math.ceil(self.n / self.tick)


REGISTRY: Dict[str, Spec] = {}


def register(name: str, family: str, *, held_out=False, grid=True, kmedian=False, about=""):
    def deco(fn):
        REGISTRY[name] = Spec(name, family, fn, held_out, grid, kmedian, about or (fn.__doc__ or "").strip())
        return fn
    return deco


def split_name(name: str) -> Tuple[str, bool]:
    return (name[:-len(INORDER)], True) if name.endswith(INORDER) else (name, False)


def spec(name: str) -> Spec:
    base, _ = split_name(name)
    if base not in REGISTRY:
        raise KeyError(f"unknown dataset {name!r}; choose from {all_names()}")
    return REGISTRY[base]


def all_names() -> List[str]:
    return [n for s in REGISTRY for n in (s, s + INORDER)]


def default_grid() -> List[str]:
    return [n for s in REGISTRY.values() if s.grid for n in (s.name, s.name + INORDER)]


def default_kmedian() -> List[str]:
    out = [s.name for s in REGISTRY.values() if s.kmedian]
    return out + [out[0] + INORDER] if out else out


def is_held_out(name: str) -> bool:
    return spec(name).held_out


_CACHE: Dict[str, Raw] = {}


def raw(base: str) -> Raw:
    """The generator's output, cached for the last base data set only (a worker streams one at a time)."""
    if base not in _CACHE:
        _CACHE.clear()
        _CACHE[base] = REGISTRY[base].make()
    return _CACHE[base]


def load(name: str) -> Dataset:
    from .order import stream_order

    s = spec(name)
    r = raw(s.name)
    _, inorder = split_name(name)
    perm, order = stream_order(r.X.shape[0], r.y, inorder)
    return Dataset(name, s.name, order, r.X[perm], None if r.y is None else r.y[perm], r, s.family, s.held_out)


def fingerprint(X: np.ndarray) -> str:
    """sha256 of the points (float64, C order), first 12 hex digits: the same data across runs."""
    return hashlib.sha256(np.ascontiguousarray(X, dtype=np.float64).tobytes()).hexdigest()[:12]


def first_points(make: Callable[[], Raw], n: int) -> Callable[[], Raw]:
    """A generator of the n points the shuffled stream of ``make``'s data starts with (the same public
    rule): the first releases of that stream, as a data set of its own."""
    def cut() -> Raw:
        r = make()
        keep = np.sort(np.random.default_rng(0).permutation(r.X.shape[0])[:n])
        return Raw(r.X[keep], None if r.y is None else r.y[keep], r.k, r.tick, r.radius, r.center, r.bounds,
                   r.rule + f" (the first {n:,} points of the shuffled stream)", dict(r.meta, first=n))
    return cut
