"""Pub/Sub faults: Google's emulator is killed (its whole process group, SIGKILL) mid-stream and
restarted on the same port a few seconds later, while the streaming job runs on the
BundleBasedDirectRunner.

What we require (issue "Pub/Sub faults"):

* the job **recovers** — every tick 1..T is released exactly once, in tick order, and
  messages published after the restart are processed — **or it fails loudly** —
  ``PipelineResult.wait_until_finish`` raises an error about Pub/Sub (the subscription or
  the topic) within a bounded time. A job that looks RUNNING and does nothing is a bug;
* in every case no release claims points it did not process: every release message is a
  well-formed release whose DP count estimate and coreset mass are plausible against the
  points published up to its tick (a generous bound: + 5 noise standard deviations from the
  release's own privacy ledger), and no tick is released twice with different content.

Facts this test relies on (measured with Beam 2.77 and emulator 0.8.20): while the emulator is
down the DirectRunner's reader retries its Pull (``ServiceUnavailable``) for ≈ 50 s per attempt,
4 attempts per bundle; a restarted emulator is empty, so topics and subscriptions are re-created
here, and it numbers messages (globally, from 1) again; a missing subscription makes the reader
give up within seconds (``NotFound``); ``result.state`` never turns FAILED by itself on the
DirectRunner — only ``wait_until_finish`` (run in a thread here) surfaces a runner failure, so a
caller that only polls ``result.state`` sees RUNNING forever.

Malformed "canary" messages trace the input: they end in the dead-letter file with their message
ids, before the fault, right after the restart (ids the restarted emulator reuses) and once more
with a fresh id (its id counter pushed past the old ids through a scratch topic nobody reads).

Skipped where the emulator package is absent: drongo's in-process fake cannot be killed and
restarted like a server.
"""
from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                          exc_type=ImportError)

pytest.importorskip("google.cloud.pubsub_v1", reason="google-cloud-pubsub is not installed")
from google.api_core import exceptions as gexc  # noqa: E402
from google.api_core import retry as gretry  # noqa: E402

from dpstream.noise import SECRET_SEED  # noqa: E402
from dpstream.release import RELEASE_FIELDS  # noqa: E402
from pipelines import dp_stream_cluster as job_mod  # noqa: E402
from pipelines.local_pubsub import PROJECT, LocalPubSub, emulator_launcher  # noqa: E402
from pipelines.sources import HEARTBEAT_ATTRIBUTE  # noqa: E402

LAUNCHER = emulator_launcher()
pytestmark = pytest.mark.skipif(
    LAUNCHER is None,
    reason="Google's Pub/Sub emulator (Debian package google-cloud-cli-pubsub-emulator) is not installed; "
           "drongo's in-process fallback cannot be killed and restarted like a server, so there is no fault "
           "to inject")

MEANS = np.array([[-5.0, -5.0], [5.0, 5.0], [5.0, -5.0]])
K, DIM, RADIUS, EPSILON = 3, 2, 12.0, 2.0
T_TICKS, TICK_S, LEAD_TICKS, LATENESS_S = 8, 4.0, 2, 6.0
KILL_AFTER_TICK = 2       # the emulator dies right after the release of this tick has been pulled
DOWN_S = 3.0              # how long it stays dead before it is restarted on the same port
BATCH, PERIOD_S = 10, 0.25  # ≈ 40 points/s: the DirectRunner's reader (10 messages per Pull) keeps up
RECOVER_S = 45.0          # after the restarted emulator is ready: recover or fail within this
NOISE_SIGMAS = 5.0

PUBSUB_ERROR = re.compile(r"subscription|topic|pub/?sub|failed to connect|unavailable|_PubSubWriteDoFn|"
                          r"ReadPubSub", re.IGNORECASE)
_QUICK = gretry.Retry(timeout=4.0)  # a publish that cannot land gives up instead of retrying for 10 min


def _heartbeat(pub, topic) -> None:
    pub.publish(topic, b"", retry=_QUICK, timeout=4.0, **{HEARTBEAT_ATTRIBUTE: "1"}).result(timeout=5)


PATHS = {"t_in": f"projects/{PROJECT}/topics/points", "sub_in": f"projects/{PROJECT}/subscriptions/points-sub",
         "t_out": f"projects/{PROJECT}/topics/releases", "sub_out": f"projects/{PROJECT}/subscriptions/releases-sub"}


def _create_resources(pub, sub) -> None:
    """Topics and subscriptions, the input's first: the job's reader is retrying its Pull and
    gives up for good on the first NotFound (4 immediate bundle attempts)."""
    for t, s in (("t_in", "sub_in"), ("t_out", "sub_out")):
        pub.create_topic(name=PATHS[t], retry=None, timeout=10)
        sub.create_subscription(name=PATHS[s], topic=PATHS[t], ack_deadline_seconds=60, retry=None, timeout=10)


def _restart_emulator(port: int, timeout: float = 60.0) -> subprocess.Popen:
    """A fresh (empty) emulator on ``port`` in its own process group, with the topics and
    subscriptions re-created the moment it answers: its first successful RPC creates the input topic."""
    from google.cloud import pubsub_v1

    proc = subprocess.Popen([LAUNCHER, "--host=127.0.0.1", f"--port={port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + timeout
    try:
        while True:  # clients made once the port listens connect at once (no reconnect backoff)
            if proc.poll() is not None:
                raise RuntimeError(f"the restarted Pub/Sub emulator exited with code {proc.returncode} "
                                   f"(port {port} taken?)")
            if time.time() > deadline:
                raise RuntimeError(f"the restarted Pub/Sub emulator did not listen on port {port}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.05)
        pub, sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        while True:
            try:
                pub.create_topic(name=PATHS["t_in"], retry=None, timeout=2)
                break
            except (gexc.ServiceUnavailable, gexc.DeadlineExceeded):
                if time.time() > deadline:
                    raise
                time.sleep(0.02)
        sub.create_subscription(name=PATHS["sub_in"], topic=PATHS["t_in"], ack_deadline_seconds=60, retry=None,
                                timeout=10)
        pub.create_topic(name=PATHS["t_out"], retry=None, timeout=10)
        sub.create_subscription(name=PATHS["sub_out"], topic=PATHS["t_out"], ack_deadline_seconds=60,
                                retry=None, timeout=10)
        return proc
    except BaseException:
        _kill_group(proc)
        raise


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _count_sigma(privacy: dict, cfg) -> float:
    """Std of a release's DP count estimate, from the release's own ledger: the stream counter's
    prefix sum (≤ floor(log2 T) + 1 node noises); with the bicriteria, the mean over the
    Q·(L+1)·R bicriteria totals, each a sum over w buckets of binary-mechanism prefix sums,
    independent across (tree, level, repetition)."""
    nodes = int(math.floor(math.log2(cfg.horizon_ticks))) + 1
    counter = [ln for ln in privacy["lines"] if ln["component"].startswith("stream counter")]
    if counter:
        (ln,) = counter
        return ln["noise"] * (math.sqrt(2.0) if ln["mechanism"] == "discrete_laplace" else 1.0) * math.sqrt(nodes)
    sd = {}
    for ln in privacy["lines"]:
        m = re.fullmatch(r"bicriteria counters, level (\d+)", ln["component"])
        if m:
            sd[int(m.group(1))] = ln["noise"] * (math.sqrt(2.0) if ln["mechanism"] == "discrete_laplace" else 1.0)
    assert sorted(sd) == list(range(cfg.grid_levels)), privacy["lines"]
    var = cfg.n_trees * cfg.n_reps * sum(cfg.buckets * nodes * s ** 2 for s in sd.values())
    return math.sqrt(var) / (cfg.n_trees * cfg.grid_levels * cfg.n_reps)


def _a_count_sigma(privacy: dict) -> float:
    lines = [ln for ln in privacy["lines"] if ln["component"] == "semicoreset A counts"]
    assert lines, privacy["lines"]
    ln = lines[0]
    return ln["noise"] * (math.sqrt(2.0) if ln["mechanism"] == "discrete_laplace" else 1.0)


def _dead_letters(path) -> list:
    try:
        with open(path) as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        return []


def test_emulator_killed_and_restarted_mid_stream(tmp_path, capsys):
    started = time.time()
    timeline = []

    def note(what):
        timeline.append(f"{time.time() - started:6.1f}s  {what}")

    seed_path = tmp_path / "seed"
    seed_path.write_text("7c41d0e9b2a85f3e6d1c0b9a8f7e6d5c4b3a29180f1e2d3c4b5a69788796a5b4\n")
    dead_path = tmp_path / "dead.jsonl"
    attempts = []          # (wall time the publish call started, points in it): also failed ones
    received = []          # (wall time pulled, message) of the output subscription
    outcome = {}           # what wait_until_finish did
    canaries = {"pre": [], "post": [], "late": []}  # (payload, message id)
    max_id = {"input": 0}  # the largest message id the feeder got back (ids are decimal strings)
    stop, hold = threading.Event(), threading.Event()
    fault = {}
    result = restarted = feeder = None

    with LocalPubSub(prefer="emulator") as ps:
        assert ps.kind == "google-cloud-cli-pubsub-emulator", ps.kind
        port = int(ps.host.rsplit(":", 1)[1])
        first_pgid = ps.pid
        _create_resources(ps.publisher(), ps.subscriber())
        paths = PATHS
        t_in = paths["t_in"]
        note(f"emulator at {ps.host} (process group {first_pgid})")

        # the stream's first messages: malformed canaries (dead letters carry their message ids)
        pub0 = ps.publisher()
        for i in range(3):
            payload = f"{{canary-pre-{i}".encode()
            canaries["pre"].append((payload.decode(), pub0.publish(t_in, payload).result(timeout=30)))

        t_start = math.floor(time.time() / TICK_S) + LEAD_TICKS  # public: fixed before any point
        argv = [f"--input_subscription={paths['sub_in']}", f"--output_topic={paths['t_out']}",
                f"--dead_letter={dead_path}", f"--dim={DIM}", f"--radius={RADIUS:g}", f"--k={K}",
                f"--tick_seconds={TICK_S:g}", f"--t_start={t_start * TICK_S:.0f}", f"--horizon_ticks={T_TICKS}",
                f"--allowed_lateness_seconds={LATENESS_S:g}", f"--seed_file={seed_path}", f"--epsilon={EPSILON:g}"]
        job, _ = job_mod.parse_args(argv)
        cfg = job_mod.engine_config(job)
        close_delay = job_mod.close_delay_seconds(job)

        def release_due(tick):  # when ClusterTicks closes a tick (public schedule)
            return (t_start + tick) * TICK_S + close_delay

        try:
            result = job_mod.run(argv)
            note(f"job started: {result.state}")

            def wait():
                try:
                    outcome["state"] = result.wait_until_finish()
                except BaseException as e:  # noqa: BLE001 — this is the evidence
                    outcome["error"] = e
                outcome["at"] = time.time()

            threading.Thread(target=wait, name="wait_until_finish", daemon=True).start()

            def feed():
                rng = np.random.default_rng(0)
                pub = ps.publisher()
                while not stop.is_set():
                    now = time.time()
                    if hold.is_set():
                        time.sleep(0.05)
                        continue
                    try:
                        if t_start * TICK_S <= now < (t_start + T_TICKS) * TICK_S:
                            X = MEANS[rng.integers(0, K, BATCH)] + rng.normal(scale=0.4, size=(BATCH, DIM))
                            attempts.append((now, BATCH))
                            futures = [pub.publish(t_in, json.dumps({"x": x.tolist()}).encode(), retry=_QUICK,
                                                   timeout=4.0) for x in X]
                            for f in futures:
                                max_id["input"] = max(max_id["input"], int(f.result(timeout=5)))
                        else:
                            _heartbeat(pub, t_in)
                    except Exception:  # the emulator is down or empty: keep trying, with a fresh client
                        pub = ps.publisher()
                        time.sleep(0.3)
                    time.sleep(PERIOD_S)

            feeder = threading.Thread(target=feed, name="feeder", daemon=True)
            feeder.start()

            def poll():
                try:
                    received.extend((time.time(), m) for m in ps.pull(paths["sub_out"]))
                except Exception:  # noqa: BLE001 — down, restarting, or not yet re-created
                    pass

            def ticks_seen():
                return sorted({json.loads(m.data)["tick"] for _, m in received})

            # -- 1. before the fault: wait for the release of tick KILL_AFTER_TICK
            deadline = release_due(KILL_AFTER_TICK) + 20
            while KILL_AFTER_TICK not in ticks_seen() and "at" not in outcome and time.time() < deadline:
                poll()
                time.sleep(0.3)
            if KILL_AFTER_TICK not in ticks_seen():
                why = (f"wait_until_finish raised {outcome['error']!r}" if "error" in outcome
                       else "no error was raised (too slow?)")
                pytest.fail(f"before any fault was injected the job released ticks {ticks_seen()} by "
                            f"{time.time() - started:.0f}s, not tick {KILL_AFTER_TICK} (due by "
                            f"{release_due(KILL_AFTER_TICK) - started:.0f}s); {why} — a failure unrelated to "
                            f"Pub/Sub faults")
            note(f"released before the fault: ticks {ticks_seen()}")

            # -- 2. the fault: SIGKILL the emulator's process group, restart it on the same port
            hold.set()
            os.killpg(first_pgid, signal.SIGKILL)
            fault["killed"] = time.time()
            note(f"emulator killed (SIGKILL to process group {first_pgid}); job state {result.state}")
            time.sleep(DOWN_S)
            restarted = _restart_emulator(port)
            fault["ready"] = time.time()
            note(f"emulator restarted on port {port} (process group {restarted.pid}), its topics and "
                 f"subscriptions re-created {fault['ready'] - fault['killed']:.1f}s after the kill; "
                 f"job state {result.state}")
            pub1 = ps.publisher()
            for i in range(3):  # the restarted emulator's first messages
                payload = f"{{canary-post-{i}".encode()
                canaries["post"].append((payload.decode(), pub1.publish(t_in, payload).result(timeout=30)))
            # the emulator numbers messages globally from 1 again: push its counter past every id of
            # before the fault (a scratch topic nobody reads), then one canary with a fresh id
            old_max = max([max_id["input"]] + [int(i) for _, i in canaries["pre"]]
                          + [int(m.message_id) for _, m in received])
            scratch = ps.topic("id-filler")
            futures = [pub1.publish(scratch, b"0") for _ in range(old_max)]
            for f in futures:
                f.result(timeout=30)
            canaries["late"].append(("{canary-late", pub1.publish(t_in, b"{canary-late").result(timeout=30)))
            hold.clear()
            note(f"canaries after the restart {canaries['post']} "
                 f"(ids reused: the largest id before the fault was {old_max}) and {canaries['late']}")

            # -- 3. recover (every tick released) or fail loudly, within a bound
            deadline = max(release_due(T_TICKS) + 15, fault["ready"] + RECOVER_S)
            failed_at = None
            while time.time() < deadline:
                poll()
                if ticks_seen() == list(range(1, T_TICKS + 1)):
                    break
                if "at" in outcome:
                    failed_at = failed_at or time.time()
                    if time.time() > failed_at + 3:  # drain what was published before it stopped
                        break
                time.sleep(0.3)
            poll()
            fault["observed_until"] = time.time()
            state_seen = result.state
            note(f"observation ends: job state {state_seen}, ticks released {ticks_seen()}, "
                 f"wait_until_finish {outcome.get('error', outcome.get('state'))!r}")
            # the canaries reach the dead-letter file a moment after the reader pulls them
            want = {p for p, _ in canaries["pre"] + canaries["post"] + canaries["late"]}
            t_dl = time.time() + 8
            while "at" not in outcome and time.time() < t_dl and \
                    not want <= {d.get("raw") for d in _dead_letters(dead_path)}:
                time.sleep(0.3)
        finally:
            stop.set()
            hold.clear()
            if feeder is not None:
                feeder.join(timeout=15)
            if result is not None:
                t0 = time.time()
                canceller = threading.Thread(target=result.cancel, name="cancel", daemon=True)
                canceller.start()
                try:  # wakes the reader's pending Pull so cancel returns at once
                    _heartbeat(ps.publisher(), t_in)
                except Exception:  # noqa: BLE001
                    pass
                canceller.join(timeout=40)
                fault["cancel_s"] = time.time() - t0
                fault["cancel_done"] = not canceller.is_alive()
            if restarted is not None:
                _kill_group(restarted)
    # LocalPubSub.stop() reaped the first emulator and restored PUBSUB_EMULATOR_HOST

    elapsed = time.time() - started
    dead = _dead_letters(dead_path)
    raw_dead = {d.get("raw"): d.get("message_id") for d in dead}
    with capsys.disabled():
        print("\n[pubsub faults] " + "\n[pubsub faults] ".join(timeline))
        print(f"[pubsub faults] dead-letter canaries: {sorted(r for r in raw_dead if r and 'canary' in r)}; "
              f"cancel {fault.get('cancel_s', float('nan')):.1f}s; test {elapsed:.0f}s")

    # -- everything started is stopped
    assert fault.get("cancel_done"), "result.cancel() did not return within 40 s"
    assert _group_gone(first_pgid), f"the first emulator's process group {first_pgid} is still alive"
    assert restarted is not None and _group_gone(restarted.pid), "the restarted emulator is still alive"
    assert elapsed < 120, elapsed

    # -- no release claims points it did not process (whatever the outcome)
    by_tick = {}
    order = sorted(received, key=lambda rm: rm[1].publish_time.timestamp())
    for _, m in order:
        rel = json.loads(m.data)  # valid JSON
        assert set(rel) == set(RELEASE_FIELDS), sorted(rel)
        t = rel["tick"]
        assert isinstance(t, int) and 1 <= t <= T_TICKS, t
        assert m.attributes["tick"] == str(t) and m.attributes["epoch"] == str(rel["epoch"]), dict(m.attributes)
        priv = rel["privacy"]
        assert priv["epsilon"] == EPSILON and priv["neighbouring"] == "add_remove", priv
        assert priv["seed"] == SECRET_SEED and priv["total_epsilon"] <= EPSILON + 1e-9, priv
        c = np.asarray(rel["centers"], dtype=float)
        assert c.shape == (K, DIM) and np.all(np.isfinite(c)) and np.all(np.linalg.norm(c, axis=1) <= RADIUS + 1e-9)
        pts = np.asarray(rel["coreset_points"], dtype=float).reshape(-1, DIM)
        w = rel["coreset_weights"]
        assert len(w) == len(pts) and all(isinstance(x, int) and x > 0 for x in w), w
        assert np.all(np.isfinite(pts)) and np.all(np.linalg.norm(pts, axis=1) <= RADIUS + 1e-6)
        # the points that could be in ticks 1..t: every publish *attempted* before tick t ended
        # (event time = publish time ≥ the call's start), failed ones included
        tick_end = (t_start + t) * TICK_S
        published = sum(n for at, n in attempts if at < tick_end)
        slack_count = NOISE_SIGMAS * _count_sigma(priv, cfg) + cfg.buckets * (math.floor(math.log2(T_TICKS)) + 1)
        assert math.isfinite(rel["count_estimate"]) and rel["count_estimate"] <= published + slack_count, (
            f"tick {t}: the DP count estimate {rel['count_estimate']:.0f} exceeds the {published} points "
            f"published up to the tick's end + {slack_count:.0f} ({NOISE_SIGMAS:g} noise sd): it counts "
            f"points the job did not receive")
        slack_w = NOISE_SIGMAS * _a_count_sigma(priv) * math.sqrt(max(1, len(w))) + 0.5 * len(w)
        assert sum(w) <= published + slack_w, (
            f"tick {t}: the coreset weighs {sum(w)} > {published} points published up to the tick's end "
            f"+ {slack_w:.0f}: it holds points the job did not receive")
        by_tick.setdefault(t, set()).add(m.data)
    twice = {t: len(v) for t, v in by_tick.items() if len(v) > 1}
    assert not twice, f"ticks released twice with different content: {twice}"
    ticks = [json.loads(m.data)["tick"] for _, m in order]
    assert all(a <= b for a, b in zip(ticks, ticks[1:])), f"releases out of tick order: {ticks}"

    # -- recovered, or failed loudly; never a silent hang
    err = outcome.get("error")
    if err is not None:
        failed_after = outcome["at"] - fault["ready"]
        assert outcome["at"] >= fault["killed"], (
            f"the job failed before the fault was injected: {err!r}")
        assert PUBSUB_ERROR.search(f"{type(err).__module__}.{type(err).__name__}: {err}"), (
            f"the job failed after the emulator restart, but not with a Pub/Sub error: "
            f"{type(err).__name__}: {err}")
        assert failed_after <= RECOVER_S, failed_after
        return  # failed loudly: acceptable; the releases it did publish were checked above

    assert ticks == list(range(1, T_TICKS + 1)), (
        f"silent hang: after the emulator was killed at {fault['killed'] - started:.0f}s and answered again "
        f"at {fault['ready'] - started:.0f}s (topics and subscriptions re-created), the job released ticks "
        f"{ticks} (all of 1..{T_TICKS} were due by {release_due(T_TICKS) - started:.0f}s) and by "
        f"{fault['observed_until'] - started:.0f}s it still looked {state_seen} while wait_until_finish had "
        f"raised nothing — it neither recovered nor failed")
    # recovered: the job reads what is published after the restart, not only heartbeats
    pre_missing = [(p, i) for p, i in canaries["pre"] if p not in raw_dead]
    assert not pre_missing, f"malformed messages from before the fault never reached the dead letters: {pre_missing}"
    seen = sorted((r, i) for r, i in raw_dead.items() if r and "canary" in r)
    late_missing = [(p, i) for p, i in canaries["late"] if p not in raw_dead]
    assert not late_missing, (
        f"the job released every tick after the restart (its reader pulls heartbeats) but a malformed message "
        f"with a fresh id published after the restart never reached the dead-letter file: {late_missing}; "
        f"dead-letter canaries seen: {seen}")
    post_missing = [(p, i) for p, i in canaries["post"] if p not in raw_dead]
    assert not post_missing, (
        f"the job recovered but silently dropped new messages published after the restart: {post_missing} "
        f"never reached the dead-letter file, while a canary with a fresh id did (dead-letter canaries seen: "
        f"{seen}). The restarted emulator numbers messages from 1 again, and DedupByMessageId (keyed by the "
        f"message id alone, remembered for 10 min) drops every new message whose id was seen before the "
        f"fault as a 'redelivery'")
