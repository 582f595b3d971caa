"""The job on the DirectRunner runs on Beam's in-process runners without first trying the Prism runner
(pipelines/job/launch.py: skip_prism): no download attempt, no worker pool, the same releases."""
from __future__ import annotations

import logging

import numpy as np
import pytest

pytest.importorskip("apache_beam", exc_type=ImportError)

from pipelines import dp_stream_cluster as job_mod  # noqa: E402
from pipelines.job.launch import skip_prism  # noqa: E402


def test_the_direct_runner_never_tries_prism(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("DPSTREAM_SEED_REGISTRY", str(tmp_path / "registry.jsonl"))
    np.save(tmp_path / "x.npy", np.random.default_rng(2).normal(size=(200, 2)))
    with caplog.at_level(logging.INFO, logger="apache_beam.runners.direct.direct_runner"):
        job_mod.run([f"--input={tmp_path}/x.npy", f"--output={tmp_path}/out", "--dim=2", "--radius=4", "--k=2",
                     "--tick_size=100", "--horizon_ticks=2", "--runner=DirectRunner"])
    beam_lines = [r.getMessage() for r in caplog.records if r.name == "apache_beam.runners.direct.direct_runner"]
    assert not any("Prism" in m for m in beam_lines), beam_lines
    assert (tmp_path / "out" / "releases.jsonl").read_text().count("\n") == 2


def test_only_the_direct_runner_is_switched():
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner, SwitchingDirectRunner
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    direct = SwitchingDirectRunner()
    assert skip_prism(direct) and direct._is_interactive
    assert not skip_prism(BundleBasedDirectRunner()) and not skip_prism(FnApiRunner())
