"""Workaround: every ``PipelineOptions.view_as`` builds an argparse parser of the view's options and parses
the command line again (Beam 2.77), and building the job's graph calls it about 480 times (per applied
transform: the type checks' ``TypeOptions``, the result-type inference, beartype's switch): 0.13–0.22 s of
CPU at every job start, before the first element (measured on the 10⁵ × 384 benchmark file).

:func:`install` memoises the view per (options object, view class). A view holds no value of its own: its
options live in the dict it shares with the object it came from (``_all_options``), and the first view of a
class has put every option of that class in that dict, so a second view of the same class from the same
flags would add nothing and reads and writes the same values as the first. The memo is bypassed when the
object's flags or option dict have been replaced since. Idempotent; applied by
:func:`pipelines.local_runner.install`.
"""
from __future__ import annotations

import weakref


def install() -> None:
    from apache_beam.options import pipeline_options as po

    if getattr(po, "_dpstream_view_cache", False):
        return
    original = po.PipelineOptions.view_as
    views = weakref.WeakKeyDictionary()  # options object → {view class: view}

    def view_as(self, cls):
        try:
            mine = views.setdefault(self, {})
        except TypeError:  # an options object that cannot be weakly referenced or hashed
            return original(self, cls)
        view = mine.get(cls)
        if view is None or view._flags is not self._flags or view._all_options is not self._all_options:
            view = mine[cls] = original(self, cls)
        return view

    view_as.__doc__ = original.__doc__
    view_as.__wrapped__ = original
    po.PipelineOptions.view_as = view_as
    po._dpstream_view_cache = True
