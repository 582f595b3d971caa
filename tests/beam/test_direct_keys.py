"""pipelines.direct_keys: the BundleBasedDirectRunner stops holding (and scanning for timers) keys whose
state and timers are all gone, and nothing a stateful DoFn sees changes."""
from __future__ import annotations

import pytest

beam = pytest.importorskip("apache_beam", reason="apache_beam is not importable", exc_type=ImportError)

from apache_beam.coders import VarIntCoder  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions  # noqa: E402
from apache_beam.testing.test_stream import TestStream as _TestStream  # noqa: E402
from apache_beam.transforms import userstate  # noqa: E402
from apache_beam.transforms.timeutil import TimeDomain  # noqa: E402
from apache_beam.utils.timestamp import Timestamp  # noqa: E402

from pipelines import direct_keys  # noqa: E402

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
