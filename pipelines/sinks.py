"""Sinks of the main job: releases and dead letters to JSON-lines files or Pub/Sub topics.

A release is DP and may go anywhere; a dead letter holds a raw record (it is
operator data, not a release: send it somewhere only the operator reads).
"""
from __future__ import annotations

import json
import os
from typing import Optional

import apache_beam as beam


def json_line(d) -> str:
    """A dict's JSON text: the one it carries (a release from ``ClusterCoreset``, already encoded:
    ``transforms.release_json``), else ``json.dumps``."""
    text = getattr(d, "json", None)
    return text if isinstance(text, str) else json.dumps(d)


def is_topic(dest: str) -> bool:
    return dest.startswith("projects/") and "/topics/" in dest


def release_message(rel: dict):
    """One Pub/Sub message per release: the JSON release, attributes tick, epoch, run and global_tick."""
    from apache_beam.io.gcp.pubsub import PubsubMessage
    return PubsubMessage(json_line(rel).encode("utf-8"),
                         {"tick": str(int(rel["tick"])), "epoch": str(int(rel["epoch"])),
                          "run": str(int(rel.get("run", 0))), "global_tick": str(int(rel.get("global_tick", rel["tick"])))})


class _AppendLinesFn(beam.DoFn):
    """Streaming file sink for local runs: appends one line per element and flushes."""

    def __init__(self, path: str):
        self.path = path

    def setup(self):
        d = os.path.dirname(self.path)
        if d:
            os.makedirs(d, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")

    def process(self, line):
        self._fh.write(line + "\n")
        self._fh.flush()

    def teardown(self):
        fh = getattr(self, "_fh", None)
        if fh is not None:
            fh.close()


class WriteJsonLines(beam.PTransform):
    """Dicts → one JSON line each in ``path`` (one file, no shard suffix), or one
    message each on a Pub/Sub topic (``projects/P/topics/T``)."""

    def __init__(self, dest: str, streaming: bool, attributes=None, label: Optional[str] = None):
        super().__init__(label)
        self.dest, self.streaming, self.attributes = dest, streaming, attributes

    def expand(self, pcoll):
        if is_topic(self.dest):
            if self.attributes is None:
                from apache_beam.io.gcp.pubsub import PubsubMessage
                msgs = pcoll | "ToMessage" >> beam.Map(
                    lambda d: PubsubMessage(json_line(d).encode("utf-8"), {}))
            else:
                msgs = pcoll | "ToMessage" >> beam.Map(self.attributes)
            return msgs | "Publish" >> beam.io.WriteToPubSub(self.dest, with_attributes=True)
        lines = pcoll | "ToJson" >> beam.Map(json_line)
        if self.streaming:
            return lines | "Append" >> beam.ParDo(_AppendLinesFn(self.dest))
        return lines | "Write" >> beam.io.WriteToText(self.dest, shard_name_template="", num_shards=1)
