"""Workaround: the BundleBasedDirectRunner re-introspects every DoFn on every bundle (Beam 2.77).

Measured (a TestStream run of the job, 8 ticks): 12,770 bundles, most of them empty (the runner runs
a bundle of every downstream stage for each upstream bundle), and 177 of its 210 CPU seconds in
``apache_beam.transforms.userstate.get_dofn_specs``, which each bundle calls about four times
(``is_stateful_dofn``, ``DirectUserStateContext``, the timer map): every call walks ``dir(dofn)`` and
builds an ``inspect.signature`` of each method. A Pub/Sub run spent so long on it that the reader
fell behind (26 of 2,112 published records read in 20 s).

:func:`install` memoises the result where it cannot depend on the instance: per class when the
class has no ``_inspect_<method>`` hook (Beam's way to give an instance its own argument spec) and
the instance holds no callable attribute (the specs are then read from the class's methods'
defaults), and, for Beam's ``Map``/``FlatMap`` wrapper, the empty answer when the wrapped plain
function has no DoFn parameter among its defaults. Anything else goes to
Beam's function; and the argument names and defaults of plain functions and methods (each bundle's
``DoFnSignature``). The results are the same Beam computes; only the time changes. The FnApiRunner
(batch) introspects once per stage and is unaffected. Idempotent; applied by
:func:`pipelines.local_runner.install`.
"""
from __future__ import annotations

import inspect


def install() -> None:
    from apache_beam.runners.direct import transform_evaluator
    from apache_beam.transforms import core, userstate

    if getattr(userstate, "_dpstream_spec_cache", False):
        return
    original = userstate.get_dofn_specs
    cache, cache_ok = {}, {}

    def get_dofn_specs(dofn):
        cls = type(dofn)
        if cls is core.CallableWrapperDoFn:
            fn = getattr(dofn, "_fn", None)
            if inspect.isfunction(fn):
                defaults = list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
                if not any(isinstance(d, core._DoFnParam) for d in defaults):
                    return set(), set()
            return original(dofn)
        cacheable = cache_ok.get(cls)
        if cacheable is None:  # specs from class methods only: no per-instance argspec hook
            cacheable = cache_ok[cls] = not any(n.startswith("_inspect_") for n in dir(cls))
        if cacheable and not any(callable(v) for v in vars(dofn).values()):
            hit = cache.get(cls)
            if hit is None:
                hit = cache[cls] = original(dofn)
            return set(hit[0]), set(hit[1])
        return original(dofn)

    # every bundle also builds a DoFnSignature, i.e. an inspect.signature of each DoFn method
    # (get_function_args_defaults); a plain function's argument names and defaults are fixed once it
    # exists (a bound method's are its function's minus the first), so they are memoised by function
    args_of = core.get_function_args_defaults
    arg_cache = {}

    def get_function_args_defaults(f):
        fn, bound = (f.__func__, True) if inspect.ismethod(f) else (f, False)
        if not inspect.isfunction(fn):
            return args_of(f)
        hit = arg_cache.get((fn, bound))
        if hit is None:
            if len(arg_cache) > 4096:  # functions cloudpickled by value are new objects per bundle
                arg_cache.clear()
            hit = arg_cache[(fn, bound)] = args_of(f)
        return list(hit[0]), list(hit[1])

    core.get_function_args_defaults = get_function_args_defaults
    userstate.get_dofn_specs = get_dofn_specs
    transform_evaluator.get_dofn_specs = get_dofn_specs  # imported by name there
    userstate._dpstream_spec_cache = True
