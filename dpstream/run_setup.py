"""The setup of one run, written once for both drivers: the :class:`dpstream.engine.Engine` builds
one per run, and every keyed Beam stage builds one per run on each worker
(``transforms/stages.py`` ``RunContext``).

A run's mechanisms are all derived from here: the noise source (the run index enters every key, so
runs draw independent noise from one seed), the privacy plan of the config, black box A and the
block size M (public: a function of the config and the plan), and the count estimate's own binary
mechanism. Nothing here reads data.
"""
from __future__ import annotations

from typing import Optional

from . import rules
from .counters import BinaryMechanism
from .noise import NoiseSource
from .params import EngineConfig
from .privacy import PrivacyPlan
from .semicoresets import make_semicoreset


class RunSetup:
    """Noise, privacy plan, A and M of run ``run`` (≥ 0). ``plans``: a cache of privacy plans by
    (config, test seed), for a worker that sets up many runs of one config (a plan is a pure function
    of those two)."""

    def __init__(self, cfg: EngineConfig, seed: bytes, run: int = 0, trace: bool = False,
                 plans: Optional[dict] = None):
        self.cfg = cfg
        self.run = int(run)
        self.noise = NoiseSource(seed, trace=trace, prefix=("run", self.run) if self.run else ())
        if plans is None:
            self.plan = PrivacyPlan.build(cfg, test_seed=self.noise.test_seed)
        else:
            key = (cfg, self.noise.test_seed)
            if key not in plans:
                plans[key] = PrivacyPlan.build(cfg, test_seed=self.noise.test_seed)
            self.plan = plans[key]
        self.A = make_semicoreset(cfg, self.plan, self.noise)
        self.block_size = cfg.block_size if cfg.block_size is not None else rules.block_size(
            cfg, self.plan, self.A.leaf_threshold())

    def count_counter(self) -> BinaryMechanism:
        """The DP count estimate's own binary mechanism over the run's T ticks (when the bicriteria
        does not give the count)."""
        return BinaryMechanism(1, self.cfg.horizon_ticks, self.noise, ("count",), self.plan.count_mechanism,
                               self.plan.count_scale)
