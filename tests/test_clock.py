"""dpstream.clock is Beam-free: the tick rule and the batch merge import and run in a process where
``apache_beam`` cannot be imported (the report step and any tool can cut a stream into the job's
ticks without Beam), and the Beam stage uses the very same class."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_NO_BEAM = """
import json, sys
sys.modules["apache_beam"] = None  # any import of Beam now raises ImportError
import numpy as np
from dpstream.clock import Partial, TickClock, merge_partials
from pipelines.job_clock import tick_clock
pos = TickClock("position", tick_size=10, horizon_ticks=5, n_shards=3)
ev = TickClock("event_time", tick_seconds=0.1, t_start=TickClock.t_start_for(0.2, 0.1), horizon_ticks=4)
part = merge_partials([Partial(np.array([[2.0], [1.0]]), np.array([7, 3]), np.full(2, np.nan), np.array(["", ""])),
                       Partial(np.array([[0.0]]), np.array([5]), np.full(1, np.nan), np.array([""]))])
class Job:  # the fields tick_clock reads
    clock, tick_size, total_ticks, point_shards = "position", 10, 5, 3
print(json.dumps({"pos": pos.ticks(np.array([0, 9, 10, 49, 50, -1]), np.zeros(6)).tolist(),
                  "ev": ev.ticks(np.zeros(3), np.array([0.2, 0.3, 0.59999])).tolist(),
                  "start": pos.tick_start_micros(3), "slots": part.slots.tolist(),
                  "job": tick_clock(Job()).ticks(np.array([25]), np.zeros(1)).tolist(),
                  "beam": "apache_beam" in sys.modules and sys.modules["apache_beam"] is not None}))
"""


def test_the_clock_runs_without_beam():
    out = subprocess.run([sys.executable, "-c", _NO_BEAM], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["pos"] == [1, 1, 2, 5, 6, 0]  # slot // tick_size + 1; no slot: outside
    assert got["ev"] == [1, 2, 4]  # on the microsecond grid: 0.3 s is tick 2 of 0.1 s from 0.2 s
    assert got["start"] == 2_000_000 and got["slots"] == [3, 5, 7] and got["job"] == [3]
    assert got["beam"] is False


def test_the_beam_stage_uses_the_same_clock():
    import pytest
    pytest.importorskip("apache_beam", exc_type=ImportError)
    from apache_beam.utils.timestamp import Timestamp

    from dpstream import clock
    from transforms import ticks
    assert ticks.TickClock is clock.TickClock and ticks.merge_partials is clock.merge_partials
    c = clock.TickClock("event_time", tick_seconds=60, t_start=29_000_000, horizon_ticks=3)
    assert c.tick_start(2) == Timestamp(micros=c.tick_start_micros(2)) == Timestamp((29_000_000 + 1) * 60)
    assert np.array_equal(c.tick_end([1, 2]), [(29_000_000 + 1) * 60.0, (29_000_000 + 2) * 60.0])
