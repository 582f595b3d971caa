"""Workaround: the BundleBasedDirectRunner keeps every key it has ever seen (Beam 2.77).

Its evaluation context stores one ``DirectUnmergedState`` per (stage, key) and never drops one, even
after the key's state is cleared and its timers have fired; and its monitor scans every stored key of
every stage for due timers between bundles (``_TransformWatermarks.extract_transform_timers``). A
stream's keys come and go — one per message id in ``DedupByMessageId``, one per global tick in
``ClusterCoreset``'s ``SpreadTicks``, per run and per epoch in the clustering stages — so a local stream
got slower the longer it ran (measured on ``make demo-pubsub``: 38% of the job's samples in that scan by
the third run, whose records then missed their deadline).

:func:`install` drops a key's entry when a bundle leaves it with no state, no timers and no global
state. A dropped key and a fresh one are the same to the runner (``DirectStepContext.get_keyed_state``
creates an empty state for a key it does not hold), so no element, state or timer changes: the scan
only stops visiting keys that have nothing. Idempotent; applied by :func:`pipelines.local_runner.install`.
"""
from __future__ import annotations


def is_empty(state) -> bool:
    """No pending timer, no state value and no global state (``InMemoryUnmergedState``; its dicts are
    defaultdicts, so empty containers may exist for windows or tags that were only read)."""
    if any(timers for timers in state.timers.values()):
        return False
    if state.global_state:
        return False
    return not any(values for tags in state.state.values() for values in tags.values())


def install() -> None:
    from apache_beam.runners.direct import evaluation_context as ec

    if getattr(ec.EvaluationContext, "_dpstream_drops_empty_keys", False):
        return
    handle_result = ec.EvaluationContext.handle_result

    def handle_result_dropping_empty_keys(self, completed_bundle, completed_timers, result):
        committed = handle_result(self, completed_bundle, completed_timers, result)
        touched = getattr(result, "partial_keyed_state", None)
        if touched:
            with self._lock:
                states = self._transform_keyed_states[result.transform]
                # the monitor iterates the stage's keys under this lock (extract_transform_timers)
                with self._watermark_manager.get_watermarks(result.transform)._lock:
                    for key in list(touched):
                        state = states.get(key)
                        if state is not None and is_empty(state):
                            del states[key]
        return committed

    ec.EvaluationContext.handle_result = handle_result_dropping_empty_keys
    ec.EvaluationContext._dpstream_drops_empty_keys = True
