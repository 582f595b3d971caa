"""Workaround: the BundleBasedDirectRunner holds no watermark for a stage's pending timers (Beam 2.77).

In Beam's model a pending event-time timer holds its stage's output watermark at the timer's time, so
what the timer emits is never behind the watermark downstream. The BundleBasedDirectRunner computes a
stage's output watermark from its input and the holds its evaluators report, and a stateful DoFn's
evaluator reports none: when the watermark moves several seconds in one step, a downstream stage's
timer can fire before the records an upstream timer emits for the same times reach it. Measured with
the job's privacy-unit stage (``BoundContributionsOnTime``, which decides a unit's records of tick k at
k's deadline, two seconds before ``ShardTicks`` closes k): a TestStream that moved the watermark 12 s
at once lost every unit's records of the jumped ticks (``after_close``).

:func:`install` adds, for the stages named in :data:`HELD_STAGES` only, the hold the model prescribes:
when the runner updates such a stage's watermarks (after a bundle, with the timers that bundle set or
cleared; after an upstream advance), the earliest event-time timer still set on any of its keys (due or
not: a due timer stays set until its firing is processed) is reported as one more hold. The stage's output watermark then waits for its timers; nothing else changes — no element, state
or timer, and no other stage's watermark semantics. Idempotent; applied by
:func:`pipelines.local_runner.install`.
"""
from __future__ import annotations

HELD_STAGES = ("BoundUnitOnTime",)  # the labels of the stages whose timers hold their output watermark
_HOLD_KEY = "__dpstream_pending_timers__"


def earliest_event_timer(keyed_states):
    """The earliest event-time timer set on any key (``DirectUnmergedState.timers``), or None."""
    from apache_beam.transforms.timeutil import TimeDomain

    earliest = None
    for state in keyed_states:
        for timers in state.timers.values():
            for (_, domain, _), ts in timers.items():
                if domain == TimeDomain.WATERMARK and (earliest is None or ts < earliest):
                    earliest = ts
    return earliest


def _held(transform) -> bool:
    return any(name in str(getattr(transform, "full_label", transform)) for name in HELD_STAGES)


def install() -> None:
    from apache_beam.runners.direct import evaluation_context as ec
    from apache_beam.runners.direct import watermark_manager as wm

    cls = wm._TransformWatermarks
    if getattr(cls, "_dpstream_holds_timers", False):
        return
    refresh = cls.refresh
    handle_result = ec.EvaluationContext.handle_result

    def refresh_holding_timers(self):  # an upstream advance: the stage's committed timers
        if any(name in self._label for name in HELD_STAGES):
            with self._lock:
                hold = earliest_event_timer(list(self._keyed_states.values()))
            self.hold({_HOLD_KEY: hold})  # None removes the hold
        return refresh(self)

    def handle_result_holding_timers(self, completed_bundle, completed_timers, result):
        # the runner updates the watermarks before it commits the bundle's keyed state: the hold must
        # already see the timers this bundle set or cleared
        if _held(result.transform):
            with self._lock:
                merged = dict(self._transform_keyed_states[result.transform])
            merged.update(result.partial_keyed_state)
            result.keyed_watermark_holds[_HOLD_KEY] = earliest_event_timer(merged.values())
        return handle_result(self, completed_bundle, completed_timers, result)

    cls.refresh = refresh_holding_timers
    ec.EvaluationContext.handle_result = handle_result_holding_timers
    cls._dpstream_holds_timers = True
