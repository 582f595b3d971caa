"""pipelines.local_runner: the workarounds apply only to local runners on a measured Beam version, and
(keys) the BundleBasedDirectRunner stops holding (and scanning for timers) keys whose state and timers
are all gone, while nothing a stateful DoFn sees changes."""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

beam = pytest.importorskip("apache_beam", reason="apache_beam is not importable", exc_type=ImportError)

from apache_beam.coders import VarIntCoder  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions  # noqa: E402
from apache_beam.testing.test_stream import TestStream as _TestStream  # noqa: E402
from apache_beam.transforms import userstate  # noqa: E402
from apache_beam.transforms.timeutil import TimeDomain  # noqa: E402
from apache_beam.utils.timestamp import Timestamp  # noqa: E402

from pipelines import local_runner  # noqa: E402
from pipelines.local_runner import keys as direct_keys  # noqa: E402

N_KEYS, KEPT = 120, 7  # keys 0..KEPT-1 keep their state to the end; the others clear it on their timer


class _RememberThenForget(beam.DoFn):
    SEEN = userstate.ReadModifyWriteStateSpec("dpstream_test_seen", VarIntCoder())
    FORGET = userstate.TimerSpec("dpstream_test_forget", TimeDomain.WATERMARK)

    def process(self, element, seen=beam.DoFn.StateParam(SEEN), forget=beam.DoFn.TimerParam(FORGET)):
        key, v = element
        before = seen.read()
        seen.write((before or 0) + v)
        if key >= KEPT:
            forget.set(Timestamp(micros=(key + 1) * 1_000_000))
        yield key, before  # a key seen again after it forgot must start afresh (None), as a new key

    @userstate.on_timer(FORGET)
    def on_forget(self, seen=beam.DoFn.StateParam(SEEN)):
        seen.clear()


def test_empty_keys_are_dropped_and_outputs_unchanged():
    direct_keys.install()
    direct_keys.install()  # idempotent
    stream = _TestStream(coder=beam.coders.TupleCoder([VarIntCoder(), VarIntCoder()]))
    stream = stream.add_elements([beam.window.TimestampedValue((k, 1), k) for k in range(N_KEYS)])
    stream = stream.advance_watermark_to(Timestamp.of(N_KEYS + 5))
    # every key comes back once after its timer fired: it must see no old state
    stream = stream.add_elements([beam.window.TimestampedValue((k, 2), N_KEYS + 6) for k in range(N_KEYS)])
    stream = stream.advance_watermark_to_infinity()
    opts = PipelineOptions(["--runner=BundleBasedDirectRunner"])
    opts.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(options=opts)
    from apache_beam.testing.util import assert_that, equal_to
    typed = p | stream | beam.Map(tuple).with_output_types(beam.typehints.Tuple[int, int])  # a deterministic key coder
    outs = typed | beam.ParDo(_RememberThenForget())
    # first elements see nothing; on the second, kept keys see their first value (1), forgetting keys
    # nothing: a key seen again after it forgot starts afresh, as a new key would
    want = [(k, None) for k in range(N_KEYS)] + [(k, 1 if k < KEPT else None) for k in range(N_KEYS)]
    assert_that(outs, equal_to(want))
    result = p.run()
    result.wait_until_finish()
    held = {t.full_label: len(s) for t, s in result._evaluation_context._transform_keyed_states.items()}
    stateful = [n for label, n in held.items() if "RememberThenForget" in label]
    assert stateful and stateful[0] <= KEPT + 1, held  # without the workaround: all N_KEYS keys stay


def test_is_empty_reads_values_not_containers():
    from apache_beam.transforms.trigger import InMemoryUnmergedState
    s = InMemoryUnmergedState()
    s.state["w"]["tag"]  # a read creates empty containers
    s.timers["w"]
    assert direct_keys.is_empty(s)
    s.timers["w"][("t", TimeDomain.WATERMARK, "")] = Timestamp(1)
    assert not direct_keys.is_empty(s)
    s.timers["w"].clear()
    s.state["w"]["tag"].append(b"x")
    assert not direct_keys.is_empty(s)


# the patch markers each workaround leaves on Beam's modules, read in a fresh interpreter
_PROBE = """
import json, sys
from pipelines import local_runner
res = local_runner.install(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
from apache_beam.runners.direct import evaluation_context, executor, transform_evaluator
from apache_beam.runners.worker import statecache, statesampler
from apache_beam.transforms import userstate
marks = {"specs": getattr(userstate, "_dpstream_spec_cache", False),
         "metrics": getattr(executor, "_dpstream_bundle_counters", False),
         "pubsub": getattr(getattr(transform_evaluator, "_PubSubReadEvaluator", None), "_dpstream_max_messages", None)
                   is not None,
         "statecache": getattr(statecache, "_dpstream_cheap_sizes", False),
         "keys": getattr(evaluation_context.EvaluationContext, "_dpstream_drops_empty_keys", False),
         "holds": getattr(__import__("apache_beam.runners.direct.watermark_manager", fromlist=["x"])
                          ._TransformWatermarks, "_dpstream_holds_timers", False),
         "sampler": getattr(statesampler, "_dpstream_sampling_period_ms", None) is not None,
         "options": getattr(__import__("apache_beam.options.pipeline_options", fromlist=["x"]),
                            "_dpstream_view_cache", False)}
print(json.dumps({"applied": list(res.applied), "skipped": res.skipped, "marks": marks}))
"""


def _probe(*args):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=root, capture_output=True, text=True,
                         check=True, timeout=120)
    import json
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def test_an_unmeasured_beam_version_gets_no_patch_and_a_logged_reason():
    """Beam's private code moves between releases: on a version the workarounds were not measured on,
    none is applied (every marker stays unset in a fresh process) and the reason is logged."""
    got, err = _probe("BundleBasedDirectRunner", "2.78.0")
    assert got["applied"] == [] and "2.78.0" in got["skipped"] and "measured" in got["skipped"], got
    assert not any(got["marks"].values()), got["marks"]
    assert "not a version the local-runner workarounds were measured on" in err


def test_a_remote_runner_gets_no_patch():
    got, _ = _probe("apache_beam.runners.portability.portable_runner.PortableRunner", beam.__version__)
    assert got["applied"] == [] and "not a local runner" in got["skipped"], got
    assert not any(got["marks"].values()), got["marks"]


def test_the_installed_beam_is_a_measured_one_and_a_local_runner_gets_every_patch():
    """setup.py pins apache-beam to the measured range; on it, a local runner gets all eight patches."""
    assert local_runner.measured(beam.__version__), (beam.__version__, local_runner.MEASURED_ON)
    got, _ = _probe("DirectRunner")
    assert got["skipped"] is None and set(got["applied"]) == set(got["marks"]), got
    assert all(got["marks"].values()), got["marks"]


def test_versions_are_compared_by_major_and_minor(caplog):
    assert local_runner.version_tuple("2.77.0") == (2, 77) == local_runner.version_tuple("2.77.1rc2")
    assert local_runner.version_tuple("2.78.0.dev0") == (2, 78)
    assert local_runner.version_tuple("garbage") == (0, 0)
    assert not local_runner.measured("2.76.0") and not local_runner.measured("3.77.0")
    with caplog.at_level(logging.WARNING, logger="dpstream"):
        res = local_runner.install("DirectRunner", "2.60.0")  # nothing patched: the gate comes first
    assert res.applied == () and any("2.60.0" in r.getMessage() for r in caplog.records)


def test_the_samplers_beam_builds_after_install_wake_every_10_ms():
    """A bundle's end joins its state-sampler thread, which sleeps up to the sampler's period (Beam: 200 ms):
    after install every sampler Beam builds without a period (as its BundleProcessor does) has the short one,
    and it still samples: a bundle's time is charged to the state it ran in."""
    from apache_beam.runners.worker import statesampler
    from apache_beam.utils.counters import CounterFactory

    from pipelines.local_runner import sampler

    sampler.install()
    sampler.install()  # idempotent
    s = statesampler.StateSampler("dpstream-test", CounterFactory())
    assert s.sampling_period_ms == sampler.SAMPLING_PERIOD_MS == 10
    assert statesampler.StateSampler("x", CounterFactory(), sampling_period_ms=200).sampling_period_ms == 200
    state = s.scoped_state("step", "process")
    s.start()
    with state:
        import time
        deadline = time.monotonic() + 0.1
        while time.monotonic() < deadline:
            pass
    s.stop()
    assert state.sampled_msecs_int() > 0


def test_a_memoised_options_view_reads_and_writes_what_a_fresh_view_would():
    """The options' views, memoised (pipelines.local_runner.options): the same view object per class, sharing
    its values with the object and its other views both ways, a new one once the flags are replaced, and
    the values a fresh view parses from the same flags."""
    from apache_beam.options.pipeline_options import (DebugOptions, PipelineOptions, StandardOptions,
                                                      TypeOptions)

    from pipelines.local_runner import options as options_patch

    options_patch.install()
    opts = PipelineOptions(["--runner=DirectRunner", "--experiments=a", "--no_pipeline_type_check"])
    fresh = PipelineOptions.view_as.__wrapped__
    for cls in (TypeOptions, StandardOptions, DebugOptions):
        a, b = opts.view_as(cls), opts.view_as(cls)
        assert a is b
        ref = fresh(opts, cls)
        assert {n: getattr(a, n) for n in a._visible_option_list()} == \
            {n: getattr(ref, n) for n in ref._visible_option_list()}
    assert opts.view_as(TypeOptions).pipeline_type_check is False
    opts.view_as(StandardOptions).streaming = True  # a write through one view is seen by every other
    assert opts.view_as(StandardOptions).streaming and fresh(opts, StandardOptions).streaming
    opts.view_as(DebugOptions).experiments.append("b")
    assert opts.view_as(DebugOptions).experiments == ["a", "b"] == opts.get_all_options()["experiments"]
    old = opts.view_as(TypeOptions)
    opts._flags = ["--runtime_type_check"]  # replaced flags: the memo is not used
    assert opts.view_as(TypeOptions) is not old
    other = PipelineOptions(["--runner=DirectRunner"])  # views are per options object
    assert other.view_as(StandardOptions) is not opts.view_as(StandardOptions)
    assert other.view_as(StandardOptions).streaming is False
