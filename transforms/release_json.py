"""The JSON line of a release, encoded once where the release is made (``ClusterCoreset``).

``json.dumps`` of the release dicts was a fifth of the job's CPU (4.4 s of ~25 s at n = 1e6, d = 10):
81 MB of floats, 92% of them coreset points, and most ticks re-release the previous tick's coreset
(ReleaseCoreset re-sends its cached coreset when no DP output changed). :class:`ReleaseEncoder` keeps
the encodings of the array fields by their content, so a repeated coreset, unchanged centers and the
run's privacy plan are encoded once; the text is byte for byte ``json.dumps(release.to_dict())`` (the
default separators join the fields' own encodings). The text rides with the dict as
:class:`ReleaseDict` and the sinks (``pipelines/sinks.py``) write it instead of encoding again.
"""
from __future__ import annotations

import json
from collections import OrderedDict

import numpy as np

from dpstream.release import Release
from dpstream.release_log import compact_dict, ids_dict

# the fields to_dict derives from an array of the release (a deterministic function of that array)
_ARRAY_FIELDS = ("centers", "coreset_points", "coreset_weights", "window_centers")


class ReleaseDict(dict):
    """A release dict (``Release.to_dict()``) with ``json``: its JSON text, equal to ``json.dumps(self)``.
    Treat it as read-only: the text is not re-encoded when the dict changes."""
    __slots__ = ("json",)

    def __init__(self, d: dict, text: str):
        super().__init__(d)
        self.json = text


class ReleaseEncoder:
    """``encode(rel, d)`` = ``json.dumps(d)`` for ``d = rel.to_dict()``, with the array fields' and the
    privacy plan's encodings memoised (the ``size`` most recent of each field)."""

    def __init__(self, size: int = 8):
        self.size = int(size)
        self._memo: "OrderedDict" = OrderedDict()

    def _cached(self, key, make):
        v = self._memo.get(key)
        if v is None:
            v = self._memo[key] = make()
            while len(self._memo) > self.size * (len(_ARRAY_FIELDS) + 1):
                self._memo.popitem(last=False)
        else:
            self._memo.move_to_end(key)
        return v

    def encode(self, rel: Release, d: dict) -> str:
        parts = []
        for k, v in d.items():
            if k in _ARRAY_FIELDS and np.asarray(getattr(rel, k)).dtype.kind in "biuf":
                a = np.asarray(getattr(rel, k))
                # keyed by the array's bytes, not by a version: a wrong hit is impossible (numbers only:
                # an object array's bytes are addresses)
                frag = self._cached((k, a.dtype.str, a.shape, a.tobytes()), lambda v=v: json.dumps(v))
            elif k == "privacy":
                # the plan object is cached per process and never changed after it is built; the memo holds
                # it, so its id stays its own
                frag = self._cached(("privacy", id(rel.plan)), lambda v=v: (rel.plan, json.dumps(v)))[1]
            else:
                frag = json.dumps(v)
            parts.append(f"{json.dumps(k)}: {frag}")
        return "{" + ", ".join(parts) + "}"

    def release_dict(self, rel: Release, same_as=None, ids=None) -> ReleaseDict:
        """``rel.to_dict()``, or its line of a release log: with ``same_as`` (a tick) the coreset arrays
        replaced by the reference (:func:`dpstream.release_log.compact_dict`), with ``ids``
        (``(coreset_ids, coreset_rows)``) its points by id (:func:`dpstream.release_log.ids_dict`)."""
        d = rel.to_dict()
        if same_as is not None:
            d = compact_dict(d, same_as)
        elif ids is not None:
            d = ids_dict(d, *ids)
        return ReleaseDict(d, self.encode(rel, d))
