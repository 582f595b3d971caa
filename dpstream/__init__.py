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
from .release import Release

__all__ = ["DPStreamClusterer", "DPStreamWarning", "Engine", "EngineConfig", "PrivacyPlan", "Release", "UnsafeSeedWarning"]
__version__ = "0.1.0"
