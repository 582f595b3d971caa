"""One clock for a TestStream pipeline: the runner's processing time and ``Timestamp.now()``.

On the BundleBasedDirectRunner a pipeline with a ``TestStream`` runs on a test clock that
starts at 0 and moves only with ``advance_processing_time``, while ``Timestamp.now()`` (which
``DedupByMessageId`` reads to arm its REAL_TIME expiry timer and to judge how long after its
publish time a message arrived) is the machine's clock. In production both are the wall
clock. ``runner_clock(start)`` makes them one clock again for a test: the runner's test clock
starts at ``start`` (seconds since the epoch, e.g. when the test's messages were published)
and ``Timestamp.now()`` reads it, so a test's result no longer depends on the day it runs.
"""
from __future__ import annotations

import contextlib

import pytest
from apache_beam.runners.direct import direct_runner
from apache_beam.runners.direct.clock import TestClock
from apache_beam.utils.timestamp import Timestamp


@contextlib.contextmanager
def runner_clock(start_seconds: float):
    """Within the block, a TestStream pipeline's processing-time clock starts at ``start_seconds``
    and ``Timestamp.now()`` reads it; yields the clock (``.time()``). One pipeline run per block."""
    clock = TestClock(Timestamp.of(start_seconds))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(direct_runner, "TestClock", lambda: clock)
        mp.setattr(Timestamp, "now", staticmethod(lambda: Timestamp.of(clock.time())))
        yield clock
