"""dpstream: differentially private streaming k-means / k-median.

An implementation of Epasto, Mukherjee and Zhong, "Differentially Private
Clustering in Data Streams" (arXiv 2307.07449): continual release of a DP
coreset and k centers with polylogarithmic memory.
"""
from .api import DPStreamClusterer, DPStreamWarning
from .engine import Engine
from .noise import UnsafeSeedWarning
from .params import EngineConfig
from .privacy import PrivacyPlan
from .reader import ReleaseModel, read_releases
from .release import Release, ReleasedPlan

__all__ = ["DPStreamClusterer", "DPStreamWarning", "Engine", "EngineConfig", "PrivacyPlan", "Release",
           "ReleaseModel", "ReleasedPlan", "UnsafeSeedWarning", "read_releases"]
__version__ = "0.1.0"
