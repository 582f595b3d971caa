"""``make demo-pubsub``: the streaming job against a local Pub/Sub, live.

Starts Google's Pub/Sub emulator (or drongo's in-process server where the
emulator is absent), creates the topics and subscriptions, publishes a drifting
Gaussian-mixture stream at a steady rate (plus heartbeat messages that keep the
DirectRunner's watermark moving), runs the streaming job on the
BundleBasedDirectRunner through several runs of T ticks (``--runs``), prints each
release's run centers and window centers and the privacy plan from
the output subscription, and stops everything it started (the job by cancel,
the emulator by its process group); its seed file and dead letters live in a
temporary folder removed at exit.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import threading
import time

import numpy as np


@contextlib.contextmanager
def private_workdir():
    """A temporary folder for the demo's seed file and dead letters, removed on exit (also on
    Ctrl-C or an error): the seed is a secret and must not outlive the run."""
    tmp = tempfile.mkdtemp(prefix="dpstream-demo-")
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def centers_text(rel: dict) -> str:
    """A release's run centers for the console, or "no data yet" when its DP coreset is empty (no block
    of this run released yet: the centers would only be the ball's center)."""
    if not rel.get("coreset_weights"):
        return "no data yet"
    return "  ".join(f"({c[0]:6.2f},{c[1]:6.2f})" for c in rel["centers"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=4, help="ticks per run, the job's --horizon_ticks T (default 4)")
    ap.add_argument("--runs", type=int, default=3, help="runs of T ticks the demo streams through (default 3)")
    ap.add_argument("--window_runs", type=int, default=2, help="closed runs in the window centers (default 2; "
                                                                 "0 = all time)")
    ap.add_argument("--tick_seconds", type=float, default=3.0, help="seconds per tick (default 3)")
    ap.add_argument("--rate", type=int, default=60, help="points published per second (default 60)")
    ap.add_argument("--epsilon", type=float, default=2.0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")

    from pipelines import dp_stream_cluster as job_mod
    from pipelines.local_pubsub import LocalPubSub
    from pipelines.sources import HEARTBEAT_ATTRIBUTE
    from dpstream.plan_text import plan_table

    k, d, radius = 4, 2, 20.0
    rng = np.random.default_rng()
    means0 = rng.uniform(-8, 8, size=(k, d))
    drift = rng.normal(size=(k, d))
    drift *= 4.0 / np.linalg.norm(drift, axis=1, keepdims=True)  # each mean moves 4 units over the demo
    with private_workdir() as tmp, LocalPubSub() as ps:
        print(f"local Pub/Sub: {ps.kind} at {ps.host}")
        t_in, t_out = ps.topic("points"), ps.topic("releases")
        sub_in, sub_out = ps.subscription(t_in, "points-sub"), ps.subscription(t_out, "releases-sub")
        t_start = math.floor(time.time() / args.tick_seconds) + 2
        seed = os.path.join(tmp, "seed")
        fd = os.open(seed, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, os.urandom(32).hex().encode())
        os.close(fd)
        argv_job = [f"--input_subscription={sub_in}", f"--output_topic={t_out}",
                    f"--dead_letter={tmp}/dead_letter.jsonl", f"--dim={d}", f"--radius={radius}", f"--k={k}",
                    f"--tick_seconds={args.tick_seconds}", f"--t_start={t_start * args.tick_seconds!r}",
                    f"--horizon_ticks={args.ticks}", f"--runs={args.runs}", f"--window_runs={args.window_runs}",
                    f"--allowed_lateness_seconds={2 * args.tick_seconds}",
                    f"--epsilon={args.epsilon}", f"--seed_file={seed}"]
        print("job: python -m pipelines.dp_stream_cluster " + " ".join(argv_job))
        result = job_mod.run(argv_job)
        stop = threading.Event()
        total = args.ticks * args.runs
        t_end = (t_start + total) * args.tick_seconds

        def feed():
            start = t_start * args.tick_seconds
            while not stop.is_set():
                now = time.time()
                if start <= now < t_end:
                    frac = (now - start) / (t_end - start)
                    m = max(1, args.rate // 4)
                    lab = rng.integers(0, k, m)
                    X = means0[lab] + frac * drift[lab] + rng.normal(scale=0.7, size=(m, d))
                    ps.publish_json(t_in, ({"x": x.tolist()} for x in X))
                else:
                    ps.publisher().publish(t_in, b"", **{HEARTBEAT_ATTRIBUTE: "1"}).result(timeout=30)
                time.sleep(0.25)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        print(f"publishing ~{args.rate} points/s of a drifting {k}-cluster mixture; "
              f"{args.runs} runs of {args.ticks} ticks of {args.tick_seconds:g} s; window centers merge the "
              f"current run's coreset with the last {args.window_runs or 'all'} closed runs'\n")
        seen, deadline = 0, t_end + 3 * args.tick_seconds + 40
        try:
            while seen < total and time.time() < deadline:
                for msg in sorted(ps.pull(sub_out), key=lambda m: int(json.loads(m.data)["global_tick"])):
                    rel = json.loads(msg.data)
                    if seen == 0:
                        print(plan_table(rel["privacy"]) + "\n")
                    seen += 1
                    cs = centers_text(rel)
                    print(f"run {rel['run']} tick {rel['tick']:2d} (global {rel['global_tick']:3d})  epoch {rel['epoch']}"
                          f"  DP count ≈ {rel['count_estimate']:6.0f}  run centers {cs}", flush=True)
                    if rel["run"] > 0:
                        ws = "  ".join(f"({c[0]:6.2f},{c[1]:6.2f})" for c in rel["window_centers"])
                        print(f"{'':40s}window (runs {rel['window_first_run']}–{rel['run']}) {ws}", flush=True)
                time.sleep(0.3)
        except KeyboardInterrupt:
            print("interrupted")
        finally:
            stop.set()
            feeder.join(timeout=10)
            canceller = threading.Thread(target=result.cancel)
            canceller.start()
            ps.publisher().publish(t_in, b"", **{HEARTBEAT_ATTRIBUTE: "1"}).result(timeout=30)
            canceller.join(timeout=60)
            job_mod.print_summary(job_mod.parse_args(argv_job)[0], result)  # operator telemetry, stderr
    drifted = means0 + drift
    print("\ntrue means at the end (public demo data): " +
          "  ".join(f"({c[0]:6.2f},{c[1]:6.2f})" for c in drifted))
    print(f"{seen} releases received; job cancelled, Pub/Sub stopped")
    return 0 if seen == total else 1


if __name__ == "__main__":
    sys.exit(main())
