"""Benchmark data sets: a registry of generators, each with its PUBLIC radius rule.

Every data set comes with a ball B(center, Λ) for dpstream and a per-coordinate box for diffprivlib,
both derived from public knowledge of how the data is generated or encoded (generator parameters,
pixel ranges, unit-norm embeddings) — never from the data. The rule is written into the results.

A generator is a zero-argument function returning a :class:`Raw` (points in generator order, their
labels); :func:`register` adds it under its name. :func:`load` gives the stream: ``name`` is the points
in a fixed random order (``numpy.random.default_rng(0).permutation``); ``name_inorder`` the same points
sorted by cluster label (stable), the clusters arriving one after another — for a data set without
labels (china) its natural order (raster order of the image). The data and both orders are the same for
every benchmark seed: seeds vary only the methods' randomness.
"""
from __future__ import annotations

from .registry import (INORDER, first_points, REGISTRY, Dataset, Raw, Spec, all_names, default_grid, default_kmedian,  # noqa: F401
                       fingerprint, is_held_out, load, raw, register, spec, split_name)

# the generators register themselves, in report order
from . import blobs, gmm100, digits, china, embeddings, skewed, aniso, pixels  # noqa: E402,F401
