"""The job's entry module and its parts (pipelines/job/): a frozen Job that holds the engine's own
configuration, the clustering applied as one composite step, failures still named by their stage, and
the modules kept small. Nothing here runs a pipeline."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("apache_beam")

import apache_beam as beam  # noqa: E402

from dpstream.params import EngineConfig  # noqa: E402
from pipelines import dp_stream_cluster as job_mod  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _files_job(tmp_path, *extra):
    np.save(tmp_path / "x.npy", np.zeros((10, 3)))
    return job_mod.parse_args([f"--input={tmp_path}/x.npy", "--dim=3", "--radius=2", "--k=4", "--epsilon=0.5",
                               "--horizon_ticks=7", "--runs=2", "--window_runs=0", "--objective=kmedian",
                               "--center=1,2,3", f"--output={tmp_path}/o", *extra])[0]


def test_the_job_holds_the_engines_configuration_and_is_frozen(tmp_path):
    job = _files_job(tmp_path)
    want = EngineConfig(n_clusters=4, dim=3, radius=2.0, epsilon=0.5, delta=1e-6, horizon_ticks=7, runs=2,
                        window_runs=0, neighbouring="replace_one", objective="kmedian", center=(1.0, 2.0, 3.0))
    assert job.cfg.to_dict() == want.to_dict()
    assert job_mod.engine_config(job) is job.cfg  # one object: the graph, the plan and the registry read it
    assert (job.k, job.dim, job.radius, job.epsilon, job.horizon_ticks, job.runs, job.window_runs) == \
        (4, 3, 2.0, 0.5, 7, 2, 0)
    assert job.objective == "kmedian" and job.center == (1.0, 2.0, 3.0) and job.total_ticks == 14
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.tick_size = 5
    with pytest.raises(AttributeError):
        job.k = 3  # a view of the config, not a copy to drift
    assert isinstance(job.files, tuple) and job.n_slots == 10


def test_no_job_field_repeats_a_config_parameter_and_the_unit_is_read_from_the_config():
    from dpstream.params import PARAMETERS
    from pipelines.job.description import Job

    assert not {f.name for f in dataclasses.fields(Job)} & (set(PARAMETERS) | {"unit", "k"})
    sub = ["--input_subscription=projects/p/subscriptions/s", "--output=/tmp/unused", "--dim=2", "--radius=1",
           "--tick_seconds=10", "--horizon_ticks=2", "--privacy_id_field=user", "--max_contributions=3",
           "--max_contributions_per_tick=2"]
    job = job_mod.parse_args(sub)[0]
    assert job.unit == {"privacy_unit": "user", "max_contributions": 3, "max_contributions_per_tick": 2,
                        "contribution": "records"}  # the options' dict (the seed registry's identity holds it)
    assert type(job.unit["contribution"]) is str and job.cfg.unit.privacy_unit == "user"
    assert job_mod.parse_args(sub[:-3])[0].unit is None
    with pytest.raises(AttributeError):
        job.unit = None  # a view of the config
def test_an_event_time_job_protects_add_remove(tmp_path):
    (tmp_path / "x.jsonl").write_text('{"x": [0, 0, 0], "ts": 1796119200}\n')
    job = job_mod.parse_args([f"--input={tmp_path}/x.jsonl", "--dim=3", "--radius=2", "--tick_seconds=10",
                              "--t_start=2026-12-01T10:00:00Z", "--horizon_ticks=3", f"--output={tmp_path}/o"])[0]
    assert job.clock == "event_time" and job.cfg.neighbouring == "add_remove"


def _top_level_labels(job, seed_path):
    p = beam.Pipeline(options=job_mod.pipeline_options(job, []))
    job_mod.build(p, job, seed_path)
    top = [t.full_label for t in p.transforms_stack[0].parts]
    inner = {t.full_label for part in p.transforms_stack[0].parts for t in part.parts}
    return top, inner


@pytest.mark.parametrize("semicoreset", ["tree", "snap"])
def test_the_clustering_is_one_composite_step(tmp_path, semicoreset):
    job = _files_job(tmp_path, f"--semicoreset={semicoreset}", "--runs=1")
    (tmp_path / "seed").write_bytes(b"\x01" * 32)
    top, inner = _top_level_labels(job, str(tmp_path / "seed"))
    bic = ["BicriteriaCenters", "CenterRegistry"] if semicoreset == "snap" else []
    assert top == ["ReadFiles", "ParsePoints", "BatchIntoTicks", *bic, "ClusterTicks", "WriteReleases",
                   "WriteDeadLetters", "Progress"]
    assert {"ClusterTicks/ShardTicks", "ClusterTicks/EpochPlan", "ClusterTicks/ReleaseCoreset",
            "ClusterTicks/ClusterCoreset"} <= inner


def test_a_failure_inside_the_clustering_names_its_stage():
    err = RuntimeError("boom [while running 'ClusterTicks/ShardTicks/ParDo(_ShardTicksFn)']")
    assert "(in step ShardTicks);" in job_mod.describe_failure(err)
    err = RuntimeError("gone [while running 'ReadFiles/Read']")
    assert "(in step ReadFiles); check --input;" in job_mod.describe_failure(err)


def test_the_entry_module_is_short_and_no_pipelines_module_is_long():
    entry = ROOT / "pipelines" / "dp_stream_cluster.py"
    assert len(entry.read_text(encoding="utf-8").splitlines()) <= 120
    long = {str(f.relative_to(ROOT)): n for f in (ROOT / "pipelines").rglob("*.py")
            if (n := len(f.read_text(encoding="utf-8").splitlines())) > 400}
    assert not long, f"split these modules (one idea each): {long}"
