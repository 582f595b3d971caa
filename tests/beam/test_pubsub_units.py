"""A streaming job with a privacy unit against a local Pub/Sub (Google's emulator, or drongo's fake): the
id from the message attribute or the JSON key, one release per tick, records without an id dead-lettered,
and every unit held to its bound — the points that reach the ticks are at most L per unit (here every unit
sends far more, so exactly L per unit)."""
from __future__ import annotations

import json
import math
import os
import threading
import time

import numpy as np
import pytest

pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                    exc_type=ImportError)

from pipelines import dp_stream_cluster as job_mod  # noqa: E402
from pipelines.local_pubsub import LocalPubSub, emulator_launcher  # noqa: E402
from pipelines.sources import HEARTBEAT_ATTRIBUTE  # noqa: E402

T_TICKS, TICK_S, LEAD_S, L, USERS = 3, 2.0, 1, 3, 12


def test_a_stream_with_units_releases_every_tick_and_bounds_every_unit(tmp_path):
    seed = tmp_path / "seed"
    seed.write_text("7a2f8a61c03b4d9e8f7a6b5c4d3e2f10a9b8c7d6e5f40f1e2d3c4b5a69788797\n")
    with LocalPubSub(prefer="emulator" if emulator_launcher() else "drongo") as ps:
        t_in, t_out = ps.topic("points"), ps.topic("releases")
        sub_in, sub_out = ps.subscription(t_in, "points-sub"), ps.subscription(t_out, "releases-sub")
        t_start = math.floor(time.time() / TICK_S) + LEAD_S
        result = job_mod.run([f"--input_subscription={sub_in}", f"--output_topic={t_out}",
                              f"--dead_letter={tmp_path}/dead.jsonl", "--dim=2", "--radius=12", "--k=3",
                              f"--tick_seconds={TICK_S}", f"--t_start={t_start * TICK_S:.0f}",
                              f"--horizon_ticks={T_TICKS}", "--allowed_lateness_seconds=2", f"--seed_file={seed}",
                              "--epsilon=2", "--privacy_id_field=user", f"--max_contributions={L}",
                              "--max_contributions_per_tick=2"])
        stop, rng, pub = threading.Event(), np.random.default_rng(0), ps.publisher()
        sent = {"no_id": 0}

        def feed():  # every user in every tick, half by attribute, half by JSON key; some without an id
            while time.time() < (t_start + T_TICKS) * TICK_S and not stop.is_set():
                if time.time() >= t_start * TICK_S:
                    fs = []
                    for u in range(USERS):
                        x = (rng.normal(size=2) + [5, 5]).tolist()
                        fs.append(pub.publish(t_in, json.dumps({"x": x}).encode(), user=f"u{u}") if u % 2 else
                                  pub.publish(t_in, json.dumps({"x": x, "user": f"u{u}"}).encode()))
                    fs.append(pub.publish(t_in, json.dumps({"x": [1.0, 2.0]}).encode()))
                    sent["no_id"] += 1
                    for f in fs:
                        f.result(timeout=30)
                else:
                    pub.publish(t_in, b"", **{HEARTBEAT_ATTRIBUTE: "1"}).result(timeout=30)
                time.sleep(0.25)
            while not stop.is_set():  # heartbeats keep the watermark moving in small steps
                pub.publish(t_in, b"", **{HEARTBEAT_ATTRIBUTE: "1"}).result(timeout=30)
                time.sleep(0.25)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        msgs, deadline = [], time.time() + (LEAD_S + T_TICKS) * TICK_S + 45
        while len(msgs) < T_TICKS and time.time() < deadline:
            msgs += ps.pull(sub_out)
            time.sleep(0.3)
        stop.set()
        feeder.join(timeout=10)
        canceller = threading.Thread(target=result.cancel)
        canceller.start()
        pub.publish(t_in, b"", **{HEARTBEAT_ATTRIBUTE: "1"}).result(timeout=30)
        canceller.join(timeout=60)
        counts = job_mod.operator_counts(result)
    rels = [json.loads(m.data) for m in msgs]
    assert sorted(r["tick"] for r in rels) == list(range(1, T_TICKS + 1))
    assert all(r["privacy"]["unit"]["field"] == "user" for r in rels)
    # each unit: its first L points of the run, no more (a kept point that reached ShardTicks after the tick
    # closed, on a machine too busy to move the watermark in small steps, is counted there as after_close)
    assert counts["points_processed"] + counts.get("after_close", 0) == L * USERS, counts
    assert counts["points_processed"] > 0 and counts["dead_letter_no_privacy_id"] == sent["no_id"], counts
    dead = [json.loads(line) for line in open(os.path.join(tmp_path, "dead.jsonl"))]
    assert {d["reason"] for d in dead} == {"no_privacy_id"} and all(d["message_id"] for d in dead)
