"""dpstream: differentially private streaming k-means / k-median.

An implementation of Epasto, Mukherjee and Zhong, "Differentially Private
Clustering in Data Streams" (arXiv 2307.07449): continual release of a DP
coreset and k centers with polylogarithmic memory.
"""
from .engine import Engine, StreamEnded
from .noise import UnsafeSeedWarning
from .params import EngineConfig
from .privacy import PrivacyPlan
from .reader import ReleaseModel, read_releases
from .release import Release, ReleasedPlan

# The scikit-learn front end subclasses sklearn's estimator bases, whose import costs more than the
# rest of the package together: it loads on first use, so the engine, the reader and the Beam
# workers never pay for it.
_LAZY = {"DPStreamClusterer": ".api", "DPStreamWarning": ".api"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["DPStreamClusterer", "DPStreamWarning", "Engine", "EngineConfig", "PrivacyPlan", "Release",
           "ReleaseModel", "ReleasedPlan", "StreamEnded", "UnsafeSeedWarning", "read_releases"]
__version__ = "0.1.0"
