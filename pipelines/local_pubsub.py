"""A local Pub/Sub for tests and ``make demo-pubsub``: Google's emulator, or drongo's in-process fake.

``LocalPubSub()`` starts Google's Pub/Sub emulator (Debian package
google-cloud-cli-pubsub-emulator: ``cloud-pubsub-emulator --host=127.0.0.1
--port=N``) in its own process group and stops it by that group's id. Where the
launcher is absent it falls back to drongo's in-process gRPC server (PyPI) and
says so in :attr:`LocalPubSub.kind`. Either way it sets ``PUBSUB_EMULATOR_HOST``
for this process (Beam's DirectRunner and the Python client both honour it) and
restores it on exit.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from typing import Iterable, List, Optional

EMULATOR_PATHS = ("/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator",
                  "/usr/share/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator")
PROJECT = "dpstream-local"


def emulator_launcher() -> Optional[str]:
    found = shutil.which("cloud-pubsub-emulator")
    if found:
        return found
    for p in EMULATOR_PATHS:
        if os.access(p, os.X_OK):
            return p
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalPubSub:
    """Context manager: ``with LocalPubSub() as ps: ps.topic("in") …``."""

    def __init__(self, prefer: str = "emulator", startup_timeout: float = 60.0):
        self.prefer = prefer
        self.startup_timeout = startup_timeout
        self.kind: Optional[str] = None
        self.host: Optional[str] = None
        self._proc: Optional[subprocess.Popen] = None
        self._drongo = None
        self._prev = None
        self._log = None

    # -- lifecycle
    def __enter__(self) -> "LocalPubSub":
        self._prev = os.environ.get("PUBSUB_EMULATOR_HOST")
        launcher = emulator_launcher() if self.prefer == "emulator" else None
        if launcher:
            self._start_emulator(launcher)
        else:
            self._start_drongo()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start_emulator(self, launcher: str) -> None:
        port = _free_port()
        self._log = open(os.devnull, "wb")
        self._proc = subprocess.Popen([launcher, "--host=127.0.0.1", f"--port={port}"], stdout=self._log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        self.host = f"127.0.0.1:{port}"
        deadline = time.time() + self.startup_timeout
        while time.time() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"the Pub/Sub emulator exited with code {self._proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.2)
        else:
            self.stop()
            raise RuntimeError(f"the Pub/Sub emulator did not listen on {self.host} within "
                               f"{self.startup_timeout:.0f} s")
        os.environ["PUBSUB_EMULATOR_HOST"] = self.host
        self.kind = "google-cloud-cli-pubsub-emulator"
        self._wait_ready()

    def _wait_ready(self) -> None:
        from google.api_core import exceptions as gexc

        deadline = time.time() + self.startup_timeout
        while True:  # the port opens before the gRPC service answers
            try:
                self.publisher().list_topics(request={"project": f"projects/{PROJECT}"}, timeout=5)
                return
            except (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.RetryError):
                if time.time() > deadline:
                    raise
                time.sleep(0.3)

    def _start_drongo(self) -> None:
        try:
            from drongo.services.pubsub.emulator import PubSubEmulator
        except ImportError as e:
            raise RuntimeError("neither Google's Pub/Sub emulator (package google-cloud-cli-pubsub-emulator) "
                               "nor drongo (pip install drongo) is available") from e
        self._drongo = PubSubEmulator()
        self._drongo.start()
        self.host = os.environ.get("PUBSUB_EMULATOR_HOST")
        if not self.host:
            raise RuntimeError("drongo's Pub/Sub server did not start (grpcio missing?)")
        self.kind = "drongo in-process Pub/Sub server"

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGTERM)
                self._proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self._proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self._proc.wait(timeout=10)
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._drongo is not None:
            self._drongo.stop()
            self._drongo = None
        if self._prev is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = self._prev

    @property
    def pid(self) -> Optional[int]:
        return None if self._proc is None else self._proc.pid

    # -- clients and resources
    def publisher(self):
        from google.cloud import pubsub_v1
        return pubsub_v1.PublisherClient()

    def subscriber(self):
        from google.cloud import pubsub_v1
        return pubsub_v1.SubscriberClient()

    def topic(self, name: str) -> str:
        path = f"projects/{PROJECT}/topics/{name}"
        self.publisher().create_topic(name=path)
        return path

    def subscription(self, topic: str, name: str) -> str:
        path = f"projects/{PROJECT}/subscriptions/{name}"
        self.subscriber().create_subscription(name=path, topic=topic, ack_deadline_seconds=60)
        return path

    def publish_json(self, topic: str, objs: Iterable[dict], batch: int = 500) -> int:
        """Publish one JSON message per object; returns how many were published."""
        pub = self.publisher()
        futures, n = [], 0
        for obj in objs:
            futures.append(pub.publish(topic, json.dumps(obj).encode("utf-8")))
            n += 1
            if len(futures) >= batch:
                for f in futures:
                    f.result(timeout=30)
                futures = []
        for f in futures:
            f.result(timeout=30)
        return n

    def pull(self, subscription: str, max_messages: int = 100) -> List:
        """Pull what is there now (returns at once) and acknowledge it."""
        sub = self.subscriber()
        resp = sub.pull(request={"subscription": subscription, "max_messages": max_messages,
                                 "return_immediately": True}, timeout=30)
        msgs = list(resp.received_messages)
        if msgs:
            sub.acknowledge(request={"subscription": subscription, "ack_ids": [m.ack_id for m in msgs]})
        return [m.message for m in msgs]
