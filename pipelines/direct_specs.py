"""Workaround: the BundleBasedDirectRunner re-introspects every DoFn on every bundle (Beam 2.77).

Measured (a TestStream run of the job, 8 ticks): 12,770 bundles, most of them empty (the runner runs
a bundle of every downstream stage for each upstream bundle), and 177 of its 210 CPU seconds in
``apache_beam.transforms.userstate.get_dofn_specs``, which each bundle calls about four times
(``is_stateful_dofn``, ``DirectUserStateContext``, the timer map): every call walks ``dir(dofn)`` and
builds an ``inspect.signature`` of each method. A Pub/Sub run spent so long on it that the reader
fell behind (26 of 2,112 published records read in 20 s).

:func:`install` memoises the result where it cannot depend on the instance: per class for the
job's own DoFns (modules ``transforms.*`` / ``pipelines.*``; their state and timer specs are class
attributes named in method defaults), and, for Beam's ``Map``/``FlatMap`` wrapper, the empty answer
when the wrapped plain function has no DoFn parameter among its defaults. Anything else goes to
Beam's function. The result is the same sets Beam computes; only the time changes. The FnApiRunner
(batch) introspects once per stage and is unaffected. Idempotent.
"""
from __future__ import annotations

import inspect
import types

_OURS = ("transforms.", "pipelines.")


def install() -> None:
    from apache_beam.runners.direct import transform_evaluator
    from apache_beam.transforms import core, userstate

    if getattr(userstate, "_dpstream_spec_cache", False):
        return
    original = userstate.get_dofn_specs
    cache = {}

    def get_dofn_specs(dofn):
        cls = type(dofn)
        if cls is core.CallableWrapperDoFn:
            fn = getattr(dofn, "_fn", None)
            if inspect.isfunction(fn):
                defaults = list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
                if not any(isinstance(d, core._DoFnParam) for d in defaults):
                    return set(), set()
            return original(dofn)
        if cls.__module__.startswith(_OURS) and not any(isinstance(v, types.MethodType)
                                                         for v in vars(dofn).values()):
            hit = cache.get(cls)
            if hit is None:
                hit = cache[cls] = original(dofn)
            return set(hit[0]), set(hit[1])
        return original(dofn)

    userstate.get_dofn_specs = get_dofn_specs
    transform_evaluator.get_dofn_specs = get_dofn_specs  # imported by name there
    userstate._dpstream_spec_cache = True
