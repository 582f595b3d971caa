"""The release log: releases as JSON lines that do not repeat coreset points the log already holds.

Two savings, both decided in tick order per run (the rules of :class:`ReleaseLog`):

* Most ticks release the coreset of the tick before (the coreset is resampled only when a DP output it
  depends on changed). A release whose ``coreset_points`` and ``coreset_weights`` are exactly (bit for
  bit) those of the previous release of the same run carries ``"coreset_same_as_tick": a`` in their
  place, where ``a`` is the tick (of that run) whose line holds that coreset.
* A new coreset is B's sample of the run's closed epochs' coresets and the open epoch's rings, so it
  mostly re-draws points an earlier release of the run already held (at 10^6 × 10, 1,000 ticks: 82k
  released points, 4k distinct). Its line carries ``"coreset_ids"`` (one integer per point, in the
  coreset's order) and ``"coreset_rows"`` (``{"id": point}`` for the ids this line is the first to
  use) in place of ``coreset_points``; ``coreset_weights`` stays. The run's table is the union of its
  lines' ``coreset_rows``; ``coreset_points`` is ``[table[i] for i in coreset_ids]``. An id is never
  given to another point (the writer's table is bounded: past ``MAX_TABLE_FLOATS`` it forgets what it
  wrote and writes a point again under a new id).

Every other field is written as ``Release.to_dict`` gives it. Whether two released coresets, or two
released points, are bit for bit equal is a function of the releases alone (post-processing): ids and
references reveal nothing the full lines would not.

:func:`resolve` puts the arrays back (:func:`dpstream.read_releases` calls it); lines may come in any
order (a Beam sink does not keep the ticks' order), and everything a line refers to is in the same
file. A file missing some of its lines (a crashed job, a piece of a file, a reader that started in the
middle) cannot be resolved: a reference or an id whose line is absent raises ValueError saying so.

A message on a Pub/Sub topic always holds the full release: a subscriber may miss or reorder
messages, and then could not resolve a reference.

:class:`ReleaseLog` is the writer (``line(release)``, :func:`write_releases`). The Beam job decides each
reference and each line's ids where its releases are made in tick order (``ReleaseCoreset``, with
:func:`same_coreset` and :class:`RowTable`) and encodes the line in ``ClusterCoreset``: the same bytes.
"""
from __future__ import annotations

import json
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np

from .release import RELEASE_FIELDS

SAME_AS = "coreset_same_as_tick"
IDS = "coreset_ids"
ROWS = "coreset_rows"
_ARRAYS = ("coreset_points", "coreset_weights")
# the fields of a line that refers to an earlier tick's coreset, in their order
LOG_FIELDS = tuple(SAME_AS if f == "coreset_points" else f for f in RELEASE_FIELDS if f != "coreset_weights")
# the fields of a line that names its coreset's points by id, in their order
ID_FIELDS = tuple(x for f in RELEASE_FIELDS for x in ((IDS, ROWS) if f == "coreset_points" else (f,)))
# the writer's table of one run holds at most this many floats (8 MB as float64) before it starts afresh
MAX_TABLE_FLOATS = 1 << 20
_INCOMPLETE = ("the file lacks a line of its run: it was cut short (a job that stopped), is a piece of a "
               "log or a reader started in its middle; read the whole file, or write with --full_coresets")


def same_coreset(points_a, weights_a, points_b, weights_b) -> bool:
    """Bit-for-bit equality of two released coresets (so their JSON texts are equal too: 0.0 and -0.0
    differ here as in the text)."""
    pa, pb = np.asarray(points_a), np.asarray(points_b)
    wa, wb = np.asarray(weights_a, dtype=np.int64), np.asarray(weights_b, dtype=np.int64)
    return (pa.shape == pb.shape and pa.dtype == pb.dtype and wa.shape == wb.shape
            and pa.tobytes() == pb.tobytes() and wa.tobytes() == wb.tobytes())


class RowTable:
    """The writer's table of one run: the ids of the coreset points its lines have written, by the
    points' bytes (float64, so equal ids mean equal JSON text)."""

    def __init__(self, run: int, max_floats: int = MAX_TABLE_FLOATS):
        self.run = int(run)
        self.max_floats = int(max_floats)
        self.next = 0  # the next id; ids only grow, so one never names two points
        self._ids: Dict[bytes, int] = {}
        self._dim = 0

    def state_floats(self) -> int:
        """Floats the table holds (its points' coordinates)."""
        return len(self._ids) * self._dim

    def encode(self, points) -> Tuple[List[int], Dict[str, list]]:
        """``(coreset_ids, coreset_rows)`` of a coreset's points, in tick order of the run's lines."""
        P = np.ascontiguousarray(points, dtype=np.float64)
        if P.shape[0] == 0:
            return [], {}
        d = self._dim = P.shape[1]
        # one dict lookup per released point (at most B's sample size), never per stream point
        keys = P.view(np.dtype((np.void, 8 * d))).ravel().tolist()
        unseen = len(set(keys).difference(self._ids))
        if self._ids and (len(self._ids) + unseen) * d > self.max_floats:
            self._ids = {}  # bounded memory: its points are written again, under new ids
        ids, rows = [], {}
        for j, key in enumerate(keys):
            i = self._ids.get(key)
            if i is None:
                i = self._ids[key] = self.next
                self.next += 1
                rows[str(i)] = P[j].tolist()
            ids.append(i)
        return ids, rows


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


def ids_dict(d: dict, ids: List[int], rows: Dict[str, list]) -> dict:
    """``d`` (``Release.to_dict()``) with ``coreset_points`` replaced by ``coreset_ids`` and
    ``coreset_rows`` (in its place)."""
    out = {}
    for k, v in d.items():
        if k == "coreset_points":
            out[IDS] = ids
            out[ROWS] = rows
        else:
            out[k] = v
    return out


class ReleaseLog:
    """The writer of a release log: ``line(release)`` for the releases of a stream in tick order.

    Remembers the previous release's coreset per run; the first release of a run, and one whose
    coreset differs from the previous release's, hold their coreset: by ids into the run's table, or
    with ``ids=False`` as full arrays (the log's first format, which readers still read)."""

    def __init__(self, ids: bool = True):
        self._prev = None  # (run, points, weights, anchor tick) of the previous release
        self._table: Optional[RowTable] = None
        self.ids = bool(ids)

    def anchor(self, rel) -> Optional[int]:
        """The tick whose line holds ``rel``'s coreset, or None if ``rel``'s own line must hold it."""
        prev = self._prev
        if prev is not None and prev[0] == int(rel.run) and same_coreset(prev[1], prev[2], rel.coreset_points,
                                                                          rel.coreset_weights):
            return prev[3]
        self._prev = (int(rel.run), rel.coreset_points, rel.coreset_weights, int(rel.tick))
        return None

    def table(self, run: int) -> RowTable:
        """The run's table (a new run starts an empty one)."""
        if self._table is None or self._table.run != int(run):
            self._table = RowTable(run)
        return self._table

    def to_dict(self, rel) -> dict:
        d = rel.to_dict()
        a = self.anchor(rel)
        if a is not None:
            return compact_dict(d, a)
        if not self.ids:
            return d
        return ids_dict(d, *self.table(rel.run).encode(rel.coreset_points))

    def line(self, rel) -> str:
        """The JSON text of ``rel``'s line (no newline)."""
        return json.dumps(self.to_dict(rel))


def write_releases(releases: Iterable, path: str, ids: bool = True) -> int:
    """Write releases (in tick order) to ``path`` as a release log, the bytes the Beam job writes to
    ``<output>/releases.jsonl`` for the same releases (up to the order of the lines). Returns the
    number of lines. ``ids=False``: the log's first format (references to a repeated coreset only)."""
    log, n = ReleaseLog(ids=ids), 0
    with open(path, "w", encoding="utf-8") as fh:
        for rel in releases:
            fh.write(log.line(rel) + "\n")
            n += 1
    return n


def _table(dicts: List[dict], where: str) -> dict:
    """``(run, id) → point`` from every line's ``coreset_rows``."""
    rows = {}
    for d in dicts:
        if isinstance(d, dict) and isinstance(d.get(ROWS), dict):
            run = int(d.get("run", 0))
            for i, row in d[ROWS].items():
                old = rows.setdefault((run, int(i)), row)
                if old is not row and old != row:
                    raise ValueError(f"{where}two lines of run {run} give coreset point {i} different values: "
                                     f"the file mixes two logs")
    return rows


def resolve(dicts: List[dict], where: str = "") -> Iterator[Tuple[int, dict]]:
    """``(index, full dict)`` for the release dicts of one log (in any order): a reference is replaced
    by its tick's arrays and ids by their points (the same list objects: treat the dicts as
    read-only). A reference or an id the log lacks raises ValueError. Full dicts (every file written
    before the log format, or with ``--full_coresets``) pass as they are."""
    table = _table(dicts, where)

    def points(d):
        run = int(d.get("run", 0))
        try:
            return [table[(run, int(i))] for i in d[IDS]]
        except KeyError as e:
            raise ValueError(f"{where}the release of run {run} tick {d.get('tick')} names coreset point "
                             f"{e.args[0][1]}, which no line of this log holds: {_INCOMPLETE}") from None

    def whole(d, pts, weights=None):
        out = {}
        for k, v in d.items():
            if k in (IDS, "coreset_points"):
                out["coreset_points"] = pts
            elif k == SAME_AS:
                out["coreset_points"], out["coreset_weights"] = pts, weights
            elif k != ROWS:
                out[k] = v
        return out

    held = {}  # (run, tick) → the line holding that tick's coreset
    for d in dicts:
        if isinstance(d, dict) and SAME_AS not in d and ("coreset_points" in d or IDS in d):
            held[(int(d.get("run", 0)), int(d["tick"]))] = d
    done = {}  # id(line) → its coreset points, resolved once however many lines refer to it
    for i, d in enumerate(dicts):
        if not isinstance(d, dict) or (SAME_AS not in d and IDS not in d):
            yield i, d
        elif IDS in d:
            pts = done.get(id(d))
            if pts is None:
                pts = done[id(d)] = points(d)
            yield i, whole(d, pts)
        else:
            key = (int(d.get("run", 0)), int(d[SAME_AS]))
            src = held.get(key)
            if src is None:
                raise ValueError(f"{where}the release of run {key[0]} tick {d.get('tick')} refers to the coreset "
                                 f"of tick {key[1]}, which this log does not hold: {_INCOMPLETE}")
            if IDS in src:
                pts = done.get(id(src))
                if pts is None:
                    pts = done[id(src)] = points(src)
            else:
                pts = src["coreset_points"]
            yield i, whole(d, pts, src["coreset_weights"])
