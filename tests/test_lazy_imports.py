"""What a bare ``import dpstream`` and ``dpstream --help`` load.

scikit-learn, dp_accounting (with the scipy.stats it pulls in) and Apache Beam each take seconds to
import; a user who only reads releases, or asks the job for its options, must not pay for them. Each
check runs in a fresh interpreter (``sys.modules`` of this test process already holds everything).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("sklearn", "dp_accounting", "scipy", "apache_beam", "matplotlib")


def _loaded_after(code: str) -> dict:
    probe = (code + "\nimport json, sys\n"
             f"print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stderr.strip().splitlines()[-1])


def test_import_dpstream_loads_none_of_the_heavy_libraries():
    loaded = _loaded_after("import dpstream\nfrom dpstream import Engine, EngineConfig, PrivacyPlan, "
                           "Release, read_releases")
    assert not any(loaded.values()), f"import dpstream loaded {[m for m, v in loaded.items() if v]}"


def test_the_estimator_still_is_a_scikit_learn_estimator_on_first_use():
    loaded = _loaded_after("import dpstream\nfrom sklearn.base import BaseEstimator, ClusterMixin\n"
                           "assert issubclass(dpstream.DPStreamClusterer, (BaseEstimator, ClusterMixin))\n"
                           "assert issubclass(dpstream.DPStreamWarning, UserWarning)\n"
                           "assert 'DPStreamClusterer' in dir(dpstream)")
    assert loaded["sklearn"]


def test_building_a_privacy_plan_loads_the_accountant_it_needs():
    loaded = _loaded_after("from dpstream import EngineConfig, PrivacyPlan\n"
                           "from dpstream import privacy\n"
                           "plan = PrivacyPlan.build(EngineConfig(n_clusters=2, dim=2, radius=1.0, epsilon=1.0, "
                           "delta=1e-6, horizon_ticks=4))\n"
                           "assert plan.to_dict()['accountant_relation'] == 'ADD_OR_REMOVE_ONE'\n"
                           "import dp_accounting\n"
                           "assert privacy.ACCOUNTANT_RELATION is dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE")
    assert loaded["dp_accounting"] and not loaded["sklearn"]


def test_job_help_loads_no_heavy_library():
    code = ("import sys, runpy\nsys.argv = ['dpstream', '--help']\n"
            "try:\n    runpy.run_module('pipelines.dp_stream_cluster', run_name='__main__')\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code")
    out = subprocess.run([sys.executable, "-c", code + "\nimport json\n"
                          f"print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}), file=sys.stderr)"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "--horizon_ticks" in out.stdout  # it printed the help
    loaded = json.loads(out.stderr.strip().splitlines()[-1])
    assert not any(loaded.values()), f"--help loaded {[m for m, v in loaded.items() if v]}"
