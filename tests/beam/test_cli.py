"""The job as a new user meets it (issue 9): the end-of-run summary and its warnings, one-line errors,
the clock options, formats, CSV headers, the report, progress lines, and Beam's own warnings.

Every test runs the real job (``pipelines.dp_stream_cluster.main`` or ``run``) on a small file in a tmp dir."""
from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                          exc_type=ImportError)

from pipelines import dp_stream_cluster as job_mod  # noqa: E402


@pytest.fixture
def seed_file(tmp_path):
    p = tmp_path / "seed"
    p.write_bytes(os.urandom(32).hex().encode())
    return str(p)


def _blobs(n, seed=0, d=2):
    rng = np.random.default_rng(seed)
    means = np.array([[-5.0, -5.0], [5.0, 5.0], [5.0, -5.0]])[:, :d]
    return means[rng.integers(0, 3, n)] + rng.normal(scale=0.5, size=(n, d))


# --------------------------------------------------------------------------- Beam's key-coder warnings

def test_no_key_coder_warning_on_a_batch_run(tmp_path, seed_file, caplog):
    """The keyed stateful stages have deterministic key coders (type hints): Beam logs no
    'Key coder FastPrimitivesCoder … may not be deterministic' warning."""
    with caplog.at_level(logging.WARNING):
        result = job_mod.run([f"--output={tmp_path}/o", "--builtin_n=1500", "--tick_size=500",
                              f"--seed_file={seed_file}"])
    assert "DONE" in str(result.state)
    bad = [r.getMessage() for r in caplog.records if "deterministic" in r.getMessage()]
    assert bad == [], bad
