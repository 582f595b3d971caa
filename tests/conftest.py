"""Shared, generic fixtures for the dpstream unit and statistical tests.

* ``seed``: 32 fixed bytes.  Fixed seeds are for tests only (P16): they make
  every statistical test reproducible, so a threshold
  chosen at false-failure probability p fails with probability p over the
  choice of seed, and then deterministically.
* ``make_seed(tag)``: a distinct fixed 32-byte seed per tag, for tests that
  need several independent seeds.
* ``UnsafeSeedWarning`` and ``DPStreamWarning`` are silenced for every test (autouse);
  tests that check a warning itself use ``pytest.warns``, which still records it.
"""
from __future__ import annotations

import hashlib
import warnings

import pytest

from dpstream.noise import UnsafeSeedWarning


def _fixed_seed(tag: str) -> bytes:
    return hashlib.sha256(b"dpstream-tests:" + tag.encode()).digest()


@pytest.fixture
def seed() -> bytes:
    """A fixed 32-byte master seed (tests only)."""
    return b"dpstream-unit-tests-fixed-seed!!"  # exactly 32 bytes


@pytest.fixture
def make_seed():
    """``make_seed("tag")`` -> a distinct fixed 32-byte seed per tag."""
    return _fixed_seed


@pytest.fixture(autouse=True)
def _silence_unsafe_seed_warning():
    """Also silences ``DPStreamWarning`` (most points clipped), which the adversarial and fuzz streams
    trigger on purpose; the tests of the warning itself use ``pytest.warns``."""
    from dpstream import DPStreamWarning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnsafeSeedWarning)
        warnings.simplefilter("ignore", DPStreamWarning)
        yield


def chi2_gof_pvalue(observed, probs, min_expected: float = 5.0) -> float:
    """Pearson chi-square goodness-of-fit p-value of integer ``observed`` counts
    against cell probabilities ``probs`` of a complete partition (they must sum
    to 1: put the tails into their own cells).  Adjacent cells are pooled, left
    to right, until each pooled cell expects at least ``min_expected`` (the
    usual validity rule for the chi-square approximation)."""
    import numpy as np
    from scipy import stats

    obs = np.asarray(observed, dtype=float)
    probs = np.asarray(probs, dtype=float)
    assert obs.shape == probs.shape and abs(probs.sum() - 1.0) < 1e-9, "probs must be a complete partition"
    exp = probs * obs.sum()
    pooled_o, pooled_e, acc_o, acc_e = [], [], 0.0, 0.0
    for o, e in zip(obs, exp):
        acc_o += o
        acc_e += e
        if acc_e >= min_expected:
            pooled_o.append(acc_o)
            pooled_e.append(acc_e)
            acc_o = acc_e = 0.0
    if pooled_e:
        pooled_o[-1] += acc_o
        pooled_e[-1] += acc_e
    else:
        pooled_o, pooled_e = [acc_o], [acc_e]
    pooled_o, pooled_e = np.array(pooled_o), np.array(pooled_e)
    if pooled_o.size < 2:
        return 1.0
    stat = ((pooled_o - pooled_e) ** 2 / pooled_e).sum()
    return float(stats.chi2.sf(stat, pooled_o.size - 1))


@pytest.fixture
def chi2_gof():
    """The :func:`chi2_gof_pvalue` helper, as a fixture."""
    return chi2_gof_pvalue


@pytest.fixture(autouse=True)
def _private_seed_registry(tmp_path, monkeypatch):
    """Each test records used seeds in its own registry (pipelines.seed_registry), never in ~/.dpstream."""
    monkeypatch.setenv("DPSTREAM_SEED_REGISTRY", str(tmp_path / "seed_registry.jsonl"))
