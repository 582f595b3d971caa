"""What decides the ``after_close`` drop (SECURITY.md, residual risk R2 of docs/privacy.md).

A record x of tick 1, published before the tick's deadline, reaches the job late (a redelivery, a
backlog). Whether it is clustered depends on where the watermark stands when it arrives, and on the
DirectRunner the Pub/Sub reader moves the watermark to the wall clock whenever *any* pull returns
messages. (x arrives 17 s after its publish time: past its tick's close at T0 + 17, within the
deduplication's age limit of 22 s.) The TestStream below plays both deliveries on the runner's test clock: alone, x is
clustered into tick 1; with one other message pulled in between (the reader's watermark jump to that
pull's wall clock), x is dropped and counted as ``after_close`` — its fate depends on another message's
existence, not on x alone, which is what SECURITY.md states.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                          exc_type=ImportError)

from apache_beam.coders import PickleCoder  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions  # noqa: E402
from apache_beam.testing.test_stream import TestStream as _TestStream  # noqa: E402
from apache_beam.utils.timestamp import Timestamp  # noqa: E402

from pipelines import dp_stream_cluster as job_mod  # noqa: E402
from tests.beam.runner_clock import runner_clock  # noqa: E402
from tests.beam.test_pipeline import _engine_releases, _read_jsonl  # noqa: E402
from tests.beam.test_ticks import _counters  # noqa: E402
from transforms.parse import Record  # noqa: E402

T0 = 4_102_444_800.0  # 2100-01-01T00:00:00Z: tick 1 = [T0, T0 + 10), deadline T0 + 15, closes at T0 + 17
N = 30


def _record(x, published, mid):
    return Record(json.dumps({"x": list(map(float, x)), "ts": published}), None, published, mid)


def _run(tmp, another_message_pulled: bool):
    os.makedirs(tmp)
    seed = tmp / "seed"
    seed.write_bytes(os.urandom(32).hex().encode())
    out = tmp / "out"
    os.makedirs(out)
    job, _ = job_mod.parse_args(["--input_subscription=projects/p/subscriptions/unused", f"--output={out}",
                                 "--dim=2", "--radius=12", "--k=2", "--tick_seconds=10", f"--t_start={T0:.0f}",
                                 "--horizon_ticks=2", "--allowed_lateness_seconds=5", f"--seed_file={seed}"])
    rng = np.random.default_rng(5)
    D = rng.normal(0, 1, (N, 2)) + 3
    x = np.array([-4.0, -4.0])
    y = np.array([4.0, -4.0])
    recs = [_record(D[i], T0 + 1.0 + i / N, f"d{i}") for i in range(N)]
    late_x = _record(x, T0 + 8.0, "x")     # published in time for tick 1; delivered at T0 + 25
    other = _record(y, T0 + 19.0, "y")     # a message of tick 2, pulled at T0 + 20

    def tv(rs):
        return [beam.window.TimestampedValue(r, Timestamp.of(r.ts)) for r in rs]
    stream = _TestStream(coder=PickleCoder()).add_elements(tv(recs))
    if another_message_pulled:
        stream = (stream.advance_processing_time(17.0).add_elements(tv([other]))
                  .advance_watermark_to(Timestamp.of(T0 + 20.0))  # the reader: the wall clock of that pull
                  .advance_processing_time(5.0))
    else:
        stream = stream.advance_processing_time(22.0)
    stream = (stream.add_elements(tv([late_x])).advance_processing_time(2.0)
              .advance_watermark_to(Timestamp.of(T0 + 20.0 + job_mod.close_delay_seconds(job) + 1))
              .advance_processing_time(2.0).advance_watermark_to_infinity())
    from pipelines.local_runner.metrics import install
    install()
    opts = PipelineOptions(["--runner=BundleBasedDirectRunner"])
    opts.view_as(StandardOptions).streaming = True
    with runner_clock(T0 + 3.0):
        p = beam.Pipeline(options=opts)
        job_mod.build(p, job, str(seed), source=p | "Events" >> stream)
        result = p.run()
        result.wait_until_finish()
    rels = sorted(_read_jsonl(out / "releases.jsonl"), key=lambda r: r["tick"])
    return job, str(seed), D, x, y, rels, _counters(result)


def test_a_late_delivered_record_survives_alone_and_is_dropped_after_another_messages_pull(tmp_path):
    job, seed, D, x, _, rels, c = _run(tmp_path / "alone", another_message_pulled=False)
    assert c.get("after_close", 0) == 0
    assert rels == _engine_releases(job, seed, {1: np.vstack([D, x])}), "x alone: clustered into tick 1"
    job, seed, D, x, y, rels, c = _run(tmp_path / "other", another_message_pulled=True)
    assert c.get("after_close", 0) == 1, c
    assert rels == _engine_releases(job, seed, {1: D, 2: y[None, :]}), "after the pull: x is not in tick 1"
