"""Consume the job's output Pub/Sub topic: one :class:`dpstream.Release` per tick, redeliveries dropped.

The streaming job publishes one message per release (``--output_topic``): the data is the
release's JSON (:meth:`dpstream.Release.to_dict`), the attributes are ``tick`` and ``epoch``.
Pub/Sub delivers at least once, so a consumer must drop a tick it has already seen::

    from pipelines.consume_releases import pubsub_releases
    from dpstream import DPStreamClusterer

    for rel in pubsub_releases("projects/P/subscriptions/releases-sub", timeout=600):
        model = DPStreamClusterer.from_release(rel)     # predict / transform / score
        print(rel.tick, rel.epoch, model.cluster_centers_)

or from the shell (``PUBSUB_EMULATOR_HOST`` is honoured, as by every Google client)::

    python -m pipelines.consume_releases --subscription projects/P/subscriptions/releases-sub

Releases are DP: a consumer may be anyone. Ticks arrive in order on the local runners but
Pub/Sub does not promise order; sort by ``rel.tick`` if it matters.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Iterator, Optional

from dpstream.release import Release


def pubsub_releases(subscription: str, *, timeout: Optional[float] = None, max_releases: Optional[int] = None,
                    subscriber=None, pull_seconds: float = 5.0) -> Iterator[Release]:
    """Yield the releases published on a subscription of the job's output topic, each tick once.

    A message is acknowledged once the caller has taken its release (when the generator is
    resumed) or when it is a redelivery of a tick already yielded (dropped, by its ``tick``
    attribute). Stops after ``max_releases`` releases, or when no message came for ``timeout``
    seconds (``None``: never)."""
    from google.api_core import exceptions as gexc

    if subscriber is None:
        from google.cloud import pubsub_v1
        subscriber = pubsub_v1.SubscriberClient()
    seen = set()
    yielded = 0
    last = time.time()
    while max_releases is None or yielded < max_releases:
        if timeout is not None and time.time() - last > timeout:
            return
        wait = pull_seconds if timeout is None else max(0.1, min(pull_seconds, timeout - (time.time() - last)))
        try:
            resp = subscriber.pull(request={"subscription": subscription, "max_messages": 100}, timeout=wait)
        except (gexc.DeadlineExceeded, gexc.RetryError):
            continue
        received = list(resp.received_messages)
        if not received:
            time.sleep(min(0.2, wait))
            continue
        last = time.time()
        for m in received:
            msg = m.message
            attrs = dict(msg.attributes)
            try:
                tick = int(attrs["tick"])
            except (KeyError, ValueError):
                tick = None
            if tick is not None and tick in seen:  # a redelivery: drop it, acknowledge it
                subscriber.acknowledge(request={"subscription": subscription, "ack_ids": [m.ack_id]})
                continue
            rel = Release.from_dict(json.loads(msg.data.decode("utf-8")))
            seen.add(rel.tick)
            yielded += 1
            yield rel
            subscriber.acknowledge(request={"subscription": subscription, "ack_ids": [m.ack_id]})
            if max_releases is not None and yielded >= max_releases:
                return


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Print the releases of the dpstream job's output topic "
                                             "(one line per tick; redelivered ticks dropped).")
    ap.add_argument("--subscription", required=True, help="projects/P/subscriptions/S on the output topic")
    ap.add_argument("--timeout", type=float, default=None, help="stop after this many idle seconds")
    ap.add_argument("--max_releases", type=int, default=None, help="stop after this many releases")
    args = ap.parse_args(argv)
    try:
        for rel in pubsub_releases(args.subscription, timeout=args.timeout, max_releases=args.max_releases):
            cs = "  ".join("(" + ", ".join(f"{v:.3f}" for v in c) + ")" for c in rel.centers)
            print(f"tick {rel.tick}  epoch {rel.epoch}  ε spent {rel.plan.total_epsilon:.3f}  centers {cs}",
                  flush=True)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
