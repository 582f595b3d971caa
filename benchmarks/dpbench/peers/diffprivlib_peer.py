"""diffprivlib 0.6.6 ``KMeans(epsilon=ε, bounds=…)``: offline, pure ε-DP, all points at once. The bounds are
the per-coordinate box of the data set's public rule, never the data's min/max. No ε = ∞.

diffprivlib 0.6.6 does not import with scikit-learn ≥ 1.9 (``.venv-bench`` pins < 1.9); without it the
peer's runs are recorded as skipped."""
from __future__ import annotations

from ..metrics.throughput import FitClock
from .registry import Peer, register


def unavailable():
    try:
        import diffprivlib  # noqa: F401
    except Exception as exc:  # ImportError, or the scikit-learn ≥ 1.9 incompatibility
        return f"diffprivlib not importable ({type(exc).__name__}: {exc})"
    return None


def run(ds, eps, seed, ckpt_ticks, overrides=None):
    from diffprivlib.accountant import BudgetAccountant
    from diffprivlib.models import KMeans as DPKMeans

    with FitClock() as c:
        m = DPKMeans(n_clusters=ds.k, epsilon=eps, bounds=ds.bounds, random_state=seed,
                     accountant=BudgetAccountant()).fit(ds.X)
    return dict(centers=m.cluster_centers_, **c.as_dict())


register(Peer("diffprivlib", "diffprivlib KMeans (offline, pure ε)", run, eps_dependent=True,
              finite_eps_only=True, offline=True, unavailable=unavailable))
