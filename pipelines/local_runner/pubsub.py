"""Workaround: the BundleBasedDirectRunner's Pub/Sub reader pulls 10 messages per bundle (Beam 2.77).

``_PubSubReadEvaluator._read_from_pubsub`` calls ``pull(max_messages=10)`` once per bundle, and the runner
then runs a bundle of every downstream stage for it. With the job's keyed stages a bundle costs tens of
milliseconds of runner overhead whatever it holds, so a local stream was read at about 15 messages per
second (measured: 410 of ~1,440 records of an 18 s emulator run read, the rest past their tick's
deadline). :func:`install` raises the request's ``max_messages`` to :data:`MAX_MESSAGES`: a pull still
returns as soon as messages are available (as many as are there, up to the maximum), so a slow stream
sees no extra delay and a fast one fills its bundles. Acknowledgement is unchanged (the runner acks
what it pulled before emitting the bundle). Dataflow has its own reader and is unaffected.
Idempotent; applied by :func:`pipelines.local_runner.install`.
"""
from __future__ import annotations

MAX_MESSAGES = 1000


class _WidePull:
    """The reader's SubscriberClient, with ``pull`` asking for at least ``max_messages``."""

    def __init__(self, client, max_messages: int):
        self._client, self._max = client, max_messages

    def pull(self, *args, **kwargs):
        kwargs["max_messages"] = max(int(kwargs.get("max_messages") or 0), self._max)
        return self._client.pull(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)


def install(max_messages: int = MAX_MESSAGES) -> None:
    from apache_beam.runners.direct import transform_evaluator as te

    cls = getattr(te, "_PubSubReadEvaluator", None)
    if cls is None or getattr(cls, "_dpstream_max_messages", None) is not None:
        return
    original = cls._get_subscriber_client.__func__  # the classmethod's function

    def _get_subscriber_client(klass, transform):
        return _WidePull(original(klass, transform), max_messages)

    cls._get_subscriber_client = classmethod(_get_subscriber_client)
    cls._dpstream_max_messages = max_messages
