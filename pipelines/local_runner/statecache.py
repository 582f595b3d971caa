"""Workaround: the in-process SDK worker's state cache costs ~1 ms per state cell it loads or clears (Beam 2.77).

``apache_beam.runners.worker.statecache`` weighs every value it caches with ``objsize.get_deep_size``,
which by default first collects the globals of every loaded module (~2,900 modules in the job's
process) to exclude them from the walk: ~1.1 ms per call whatever the value's size. The job has
~370 keyed state cells (a stage × key: rings, epochs, shards), and each is weighed on its first read
and on every commit (a ``ReadModifyWriteState.write`` clears the cell first): ~750 calls, 0.8 s of
CPU at n = 1e6.

:func:`install` weighs values the same way without that exclusion. It is not needed: Beam's own
filter already stops the walk at every type, module and function, the only objects through which a
state value (bytes, lists and tuples of numpy arrays) could reach a module's globals. Only the
cache's size accounting is involved, never a value. Idempotent; applied by
:func:`pipelines.local_runner.install`.
"""
from __future__ import annotations


def install() -> None:
    from apache_beam.runners.worker import statecache

    if getattr(statecache, "_dpstream_cheap_sizes", False):
        return
    import objsize

    def get_deep_size(*objs):
        return objsize.get_deep_size(*objs, get_size_func=statecache._size_func,
                                     get_referents_func=statecache._get_referents_func,
                                     filter_func=statecache._filter_func, exclude_modules_globals=False)

    statecache.get_deep_size = get_deep_size
    statecache._dpstream_cheap_sizes = True
