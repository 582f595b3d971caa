"""What a tick releases (DESIGN §4): DP by construction, safe to send anywhere."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .privacy import PrivacyPlan

# The only fields a release record may carry; tests scan serialised releases against it.
RELEASE_FIELDS = ("tick", "epoch", "centers", "coreset_points", "coreset_weights", "count_estimate",
                  "n_candidate_centers", "privacy")


@dataclass(frozen=True)
class Release:
    """The release of one tick.

    tick: 1-based tick of the stream clock; epoch: index of the open epoch;
    centers: (k, d) cluster centers (post-processing of the coreset);
    coreset_points / coreset_weights: the DP weighted coreset (integer weights);
    count_estimate: a DP estimate of the number of points so far (post-processing
    of the bicriteria counters, never the exact count); n_candidate_centers: |F|;
    plan: the privacy plan the release was produced under.
    """

    tick: int
    epoch: int
    centers: np.ndarray
    coreset_points: np.ndarray
    coreset_weights: np.ndarray
    count_estimate: float
    n_candidate_centers: int
    plan: PrivacyPlan

    def to_dict(self) -> dict:
        return {
            "tick": int(self.tick),
            "epoch": int(self.epoch),
            "centers": self.centers.tolist(),
            "coreset_points": self.coreset_points.tolist(),
            "coreset_weights": [int(w) for w in self.coreset_weights],
            "count_estimate": float(self.count_estimate),
            "n_candidate_centers": int(self.n_candidate_centers),
            "privacy": self.plan.to_dict(),
        }
