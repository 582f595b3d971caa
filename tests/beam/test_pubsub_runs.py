"""The streaming job on the local Pub/Sub emulator through three runs of T ticks without a restart
(P17), with ``--runs unbounded``: one release per global tick, in order, each carrying its run, its tick within the run, the
global tick and the window's centers, each under the per-record guarantee of its run's plan."""
from __future__ import annotations

import json
import math
import threading
import time

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                          exc_type=ImportError)

from pipelines import dp_stream_cluster as job_mod  # noqa: E402
from pipelines.local_pubsub import LocalPubSub, emulator_launcher  # noqa: E402
from pipelines.sources import HEARTBEAT_ATTRIBUTE  # noqa: E402

MEANS = np.array([[-5.0, -5.0], [5.0, 5.0], [5.0, -5.0]])
T, RUNS, TICK_S, LEAD_S, RATE = 2, 3, 3.0, 2, 80


def _heartbeat(ps, topic):
    ps.publisher().publish(topic, b"", **{HEARTBEAT_ATTRIBUTE: "1"}).result(timeout=30)


def test_unbounded_streaming_job_runs_past_the_horizon_through_three_runs(tmp_path):
    seed_path = tmp_path / "seed"
    seed_path.write_text("7a1c9e0b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a3c5e7b0f1e2d3c4b5a69788796\n")
    with LocalPubSub(prefer="emulator" if emulator_launcher() else "drongo") as ps:
        t_in, t_out = ps.topic("points"), ps.topic("releases")
        sub_in, sub_out = ps.subscription(t_in, "points-sub"), ps.subscription(t_out, "releases-sub")
        t_start = math.floor(time.time() / TICK_S) + LEAD_S
        argv = [f"--input_subscription={sub_in}", f"--output_topic={t_out}", f"--dead_letter={tmp_path}/dead.jsonl",
                "--dim=2", "--radius=12", "--k=3", f"--tick_seconds={TICK_S}", f"--t_start={t_start * TICK_S:.0f}",
                f"--horizon_ticks={T}", "--runs=unbounded", "--window_runs=0", "--allowed_lateness_seconds=5",
                f"--seed_file={seed_path}", "--epsilon=2"]
        result = job_mod.run(argv)
        stop = threading.Event()
        rng = np.random.default_rng(1)
        published = {"points": 0}
        end = (t_start + T * RUNS) * TICK_S

        def feed():
            while not stop.is_set():
                if t_start * TICK_S <= time.time() < end:
                    X = MEANS[rng.integers(0, 3, RATE // 4)] + rng.normal(scale=0.4, size=(RATE // 4, 2))
                    published["points"] += ps.publish_json(t_in, ({"x": x.tolist()} for x in X))
                else:
                    _heartbeat(ps, t_in)
                time.sleep(0.25)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        msgs, deadline = [], end + 60
        while len(msgs) < T * RUNS and time.time() < deadline:
            msgs += ps.pull(sub_out)
            time.sleep(0.3)
        stop.set()
        feeder.join(timeout=10)
        canceller = threading.Thread(target=result.cancel)
        canceller.start()
        _heartbeat(ps, t_in)
        canceller.join(timeout=60)
        counts = job_mod.operator_counts(result)

    msgs = sorted(msgs, key=lambda m: m.publish_time.timestamp())
    msgs = [m for m in msgs if int(m.attributes["global_tick"]) <= T * RUNS]  # unbounded: later ticks go on
    rels = [json.loads(m.data) for m in msgs]
    # every global tick released once, in order, through three runs, without a restart
    assert [r["global_tick"] for r in rels] == list(range(1, T * RUNS + 1)), [r["global_tick"] for r in rels]
    assert [(r["run"], r["tick"]) for r in rels] == [(g // T, g % T + 1) for g in range(T * RUNS)]
    for m, r in zip(msgs, rels):
        assert (m.attributes["run"], m.attributes["global_tick"]) == (str(r["run"]), str(r["global_tick"]))
        assert r["window_first_run"] == 0  # --window_runs 0: all runs so far
        for key in ("centers", "window_centers"):
            c = np.asarray(r[key])
            assert c.shape == (3, 2) and np.all(np.isfinite(c)) and np.all(np.linalg.norm(c, axis=1) <= 12 + 1e-9)
        assert r["privacy"]["total_epsilon"] <= 2 + 1e-9  # each run's plan: ε per record, by parallel composition
        assert r["count_estimate"] >= 0
    # the records reached the clusterer (the engine equivalence of --runs is
    # tests/beam/test_pipeline.py::test_runs_job_releases_what_the_library_run_sequence_releases)
    assert counts["ticks_released"] >= T * RUNS, counts
    assert counts["points_processed"] >= 0.6 * published["points"], (counts, published)
    # each run is fresh: the DP count of its first tick is about one tick's points, not the stream's so far
    firsts = [r["count_estimate"] for r in rels if r["tick"] == 1]
    lasts = [r["count_estimate"] for r in rels if r["tick"] == T]
    assert all(f < 0.8 * last_ for f, last_ in zip(firsts[1:], lasts[:-1])), (firsts, lasts)
