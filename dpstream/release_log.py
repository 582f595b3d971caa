"""The release log: releases as JSON lines, where a tick that re-releases its run's previous coreset
says so instead of repeating it.

Most ticks release the coreset of the tick before (the coreset is resampled only when a DP output it
depends on changed), and the coreset is nine tenths of a release's bytes. In the log, a release whose
``coreset_points`` and ``coreset_weights`` are exactly (bit for bit) those of the previous release of
the same run carries ``"coreset_same_as_tick": a`` in their place, where ``a`` is the tick (of that run)
whose line holds the arrays; every other field is written as ``Release.to_dict`` gives it. The first
release of every run holds its coreset. Whether two released coresets are equal is a function of the
releases alone (post-processing): the reference reveals nothing the full lines would not.

:func:`resolve` puts the arrays back (:func:`dpstream.read_releases` calls it), so a consumer that reads
the log with dpstream sees the full releases; one that reads lines itself looks the arrays up in the
line of run ``run``, tick ``coreset_same_as_tick``. Lines may come in any order (a Beam sink does not
keep the ticks' order); the referenced line is in the same file.

A message on a Pub/Sub topic always holds the full release: a subscriber may miss or reorder
messages, and then could not resolve a reference.

:class:`ReleaseLog` is the writer (``line(release)``, :func:`write_releases`). The Beam job decides each
reference where its releases are made in tick order (``ReleaseCoreset``, with :func:`same_coreset`)
and encodes the line in ``ClusterCoreset``: the same bytes.
"""
from __future__ import annotations

import json
from typing import Iterable, Iterator, List, Optional, Tuple

import numpy as np

from .release import RELEASE_FIELDS

SAME_AS = "coreset_same_as_tick"
_ARRAYS = ("coreset_points", "coreset_weights")
# the fields of a line that refers to an earlier tick's coreset, in their order
LOG_FIELDS = tuple(SAME_AS if f == "coreset_points" else f for f in RELEASE_FIELDS if f != "coreset_weights")


def same_coreset(points_a, weights_a, points_b, weights_b) -> bool:
    """Bit-for-bit equality of two released coresets (so their JSON texts are equal too: 0.0 and -0.0
    differ here as in the text)."""
    pa, pb = np.asarray(points_a), np.asarray(points_b)
    wa, wb = np.asarray(weights_a, dtype=np.int64), np.asarray(weights_b, dtype=np.int64)
    return (pa.shape == pb.shape and pa.dtype == pb.dtype and wa.shape == wb.shape
            and pa.tobytes() == pb.tobytes() and wa.tobytes() == wb.tobytes())


def compact_dict(d: dict, anchor: int) -> dict:
    """``d`` (``Release.to_dict()``) with its coreset arrays replaced by a reference to tick ``anchor``
    (in the arrays' place, so the key order stays that of ``to_dict``)."""
    out = {}
    for k, v in d.items():
        if k == "coreset_points":
            out[SAME_AS] = int(anchor)
        elif k != "coreset_weights":
            out[k] = v
    return out


class ReleaseLog:
    """The writer of a release log: ``line(release)`` for the releases of a stream in tick order.

    Remembers the previous release's coreset per run; the first release of a run, and one whose
    coreset differs from the previous release's, hold their arrays."""

    def __init__(self):
        self._prev = None  # (run, points, weights, anchor tick) of the previous release

    def anchor(self, rel) -> Optional[int]:
        """The tick whose line holds ``rel``'s coreset, or None if ``rel``'s own line must hold it."""
        prev = self._prev
        if prev is not None and prev[0] == int(rel.run) and same_coreset(prev[1], prev[2], rel.coreset_points,
                                                                          rel.coreset_weights):
            return prev[3]
        self._prev = (int(rel.run), rel.coreset_points, rel.coreset_weights, int(rel.tick))
        return None

    def to_dict(self, rel) -> dict:
        d = rel.to_dict()
        a = self.anchor(rel)
        return d if a is None else compact_dict(d, a)

    def line(self, rel) -> str:
        """The JSON text of ``rel``'s line (no newline)."""
        return json.dumps(self.to_dict(rel))


def write_releases(releases: Iterable, path: str) -> int:
    """Write releases (in tick order) to ``path`` as a release log, the bytes the Beam job writes to
    ``<output>/releases.jsonl`` for the same releases (up to the order of the lines). Returns the
    number of lines."""
    log, n = ReleaseLog(), 0
    with open(path, "w", encoding="utf-8") as fh:
        for rel in releases:
            fh.write(log.line(rel) + "\n")
            n += 1
    return n


def resolve(dicts: List[dict], where: str = "") -> Iterator[Tuple[int, dict]]:
    """``(index, full dict)`` for the release dicts of one log (in any order): a reference is replaced
    by its tick's arrays (the same list objects: treat the dicts as read-only). A reference to a tick
    the log lacks raises ValueError. Full dicts (every file written before the log format) pass as
    they are."""
    held = {}
    for d in dicts:
        if isinstance(d, dict) and SAME_AS not in d and "coreset_points" in d:
            held[(int(d.get("run", 0)), int(d["tick"]))] = d
    for i, d in enumerate(dicts):
        if not isinstance(d, dict) or SAME_AS not in d:
            yield i, d
            continue
        key = (int(d.get("run", 0)), int(d[SAME_AS]))
        src = held.get(key)
        if src is None:
            raise ValueError(f"{where}the release of run {key[0]} tick {d.get('tick')} refers to the coreset "
                             f"of tick {key[1]}, which this log does not hold")
        full = {}
        for k, v in d.items():
            if k == SAME_AS:
                full.update((a, src[a]) for a in _ARRAYS)
            else:
                full[k] = v
        yield i, full
