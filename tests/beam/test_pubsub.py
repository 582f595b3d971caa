"""The streaming job against a real local Pub/Sub: Google's emulator from the machine image, or drongo's
in-process server where the emulator package is absent (the test prints which one ran)."""
from __future__ import annotations

import json
import math
import os
import threading
import time

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                          exc_type=ImportError)

from dpstream.noise import SECRET_SEED  # noqa: E402
from pipelines import dp_stream_cluster as job_mod  # noqa: E402
from pipelines.local_pubsub import LocalPubSub, emulator_launcher  # noqa: E402
from pipelines.sources import HEARTBEAT_ATTRIBUTE  # noqa: E402

MEANS = np.array([[-5.0, -5.0], [5.0, 5.0], [5.0, -5.0]])
T_TICKS, TICK_S, LEAD_S = 5, 4.0, 2
RATE = 130  # points per second: the DirectRunner's Pub/Sub reader pulls 10 messages per request


def _heartbeat(ps, topic):
    ps.publisher().publish(topic, b"", **{HEARTBEAT_ATTRIBUTE: "1"}).result(timeout=30)


def test_streaming_job_reads_and_writes_pubsub_and_stops_cleanly(tmp_path, capsys):
    seed_path = tmp_path / "seed"
    seed_path.write_text("5e2f8a61c03b4d9e8f7a6b5c4d3e2f10a9b8c7d6e5f40f1e2d3c4b5a69788796\n")
    kind = "emulator" if emulator_launcher() else "drongo"
    started = time.time()
    with LocalPubSub(prefer=kind) as ps:
        with capsys.disabled():
            print(f"\n[pubsub test] running against: {ps.kind} at {ps.host}")
        assert ps.kind == ("google-cloud-cli-pubsub-emulator" if kind == "emulator"
                           else "drongo in-process Pub/Sub server")
        t_in, t_out = ps.topic("points"), ps.topic("releases")
        sub_in = ps.subscription(t_in, "points-sub")
        sub_out = ps.subscription(t_out, "releases-sub")
        t_start = math.floor(time.time() / TICK_S) + LEAD_S  # public: fixed before any point is published
        argv = [f"--input_subscription={sub_in}", f"--output_topic={t_out}",
                f"--dead_letter={tmp_path}/dead.jsonl", "--dim=2", "--radius=12", "--k=3",
                f"--tick_seconds={TICK_S}", f"--t_start={t_start * TICK_S:.0f}", f"--horizon_ticks={T_TICKS}",
                "--allowed_lateness_seconds=6", f"--seed_file={seed_path}", "--epsilon=2"]
        result = job_mod.run(argv)

        stop = threading.Event()
        published = {"points": 0}
        rng = np.random.default_rng(0)

        def feed():  # ~600 points per tick while ticks 1..T are open, heartbeats between
            while time.time() < (t_start + T_TICKS) * TICK_S and not stop.is_set():
                if time.time() >= t_start * TICK_S:
                    X = MEANS[rng.integers(0, 3, RATE // 4)] + rng.normal(scale=0.4, size=(RATE // 4, 2))
                    published["points"] += ps.publish_json(t_in, ({"x": x.tolist()} for x in X))
                    if not published.get("canary"):  # a valid, unique record inside the horizon
                        published["canary"] = ps.publish_json(t_in, [{"x": [3.1415926535897, -7.2718281828459]}])
                else:
                    _heartbeat(ps, t_in)
                time.sleep(0.25)
            while not stop.is_set():
                _heartbeat(ps, t_in)
                time.sleep(0.5)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        for bad in (b"{oops", b'{"x": [1]}', b'{"x": [NaN, 0]}'):
            ps.publisher().publish(t_in, bad).result(timeout=30)


        msgs, deadline = [], time.time() + (LEAD_S + T_TICKS) * TICK_S + 45
        while len(msgs) < T_TICKS and time.time() < deadline:
            msgs += ps.pull(sub_out)
            time.sleep(0.3)
        stop.set()
        feeder.join(timeout=10)

        t0 = time.time()
        canceller = threading.Thread(target=result.cancel)
        canceller.start()
        _heartbeat(ps, t_in)  # wakes the reader's pending pull so cancel returns at once
        canceller.join(timeout=60)
        cancel_seconds = time.time() - t0
        emulator_pid = ps.pid
        counts = job_mod.operator_counts(result)  # the run summary's counters, after the cancel

    assert published["points"] >= 1500, published  # ~2600 at the nominal rate; fewer when the machine is busy
    rels = [json.loads(m.data) for m in sorted(msgs, key=lambda m: m.publish_time.timestamp())]
    ticks = [r["tick"] for r in rels]
    assert ticks == list(range(1, T_TICKS + 1)), ticks  # one release per tick, in tick order
    for m, r in zip(sorted(msgs, key=lambda m: m.publish_time.timestamp()), rels):
        assert m.attributes["tick"] == str(r["tick"]) and m.attributes["epoch"] == str(r["epoch"])
        c = np.asarray(r["centers"])
        assert c.shape == (3, 2) and np.all(np.isfinite(c)) and np.all(np.linalg.norm(c, axis=1) <= 12 + 1e-9)
        assert r["privacy"]["epsilon"] == 2 and r["privacy"]["neighbouring"] == "add_remove"
        assert r["privacy"]["seed"] == SECRET_SEED
        assert r["privacy"]["total_epsilon"] <= 2 + 1e-9
    # the last release found the three clusters
    last = np.asarray(rels[-1]["centers"])
    d = np.linalg.norm(MEANS[:, None, :] - last[None, :, :], axis=2).min(axis=1)
    assert np.all(d < 1.5), (last, d)
    for m in msgs:  # the canary is in no Pub/Sub message of the release topic
        assert b"3.1415926535" not in m.data and b"7.2718281828" not in m.data
    dead_text = open(tmp_path / "dead.jsonl").read()
    assert "3.1415926535" not in dead_text  # nor in the dead letter: it is a valid record
    dead = [json.loads(line) for line in open(tmp_path / "dead.jsonl")]
    assert sorted(x["reason"] for x in dead) == ["malformed_json", "nan_or_inf", "wrong_dimension"]
    assert all(x["message_id"] for x in dead)
    assert cancel_seconds < 30, cancel_seconds
    # the streaming runner still reports the job's counters after the cancel (what `dpstream` prints then)
    assert counts["dead_letter"] == 3 and counts["ticks_released"] == T_TICKS, counts
    assert 0 < counts["points_processed"] <= counts["valid"] <= published["points"] + 1, counts
    if emulator_pid is not None:  # stopped by its process group: nothing left behind
        with pytest.raises(ProcessLookupError):
            os.killpg(emulator_pid, 0)
    assert time.time() - started < 120
