"""What every keyed clustering stage of the Beam job shares (``transforms/cluster.py`` wires them):
the seed read from a file in ``setup`` (never pickled), the per-run noise sources and privacy plan
(:class:`RunContext`), the job's public parameters (:class:`ClusterJob`), state values read and written once per
element, and per-key telemetry for the benchmarks (``DPSTREAM_KEY_STATS``)."""
from __future__ import annotations

import base64
import binascii
import functools
import pickle
import re
from collections import OrderedDict
from typing import Any, Optional, Tuple

import numpy as np

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from dpstream import rules
from dpstream.noise import MIN_SEED_BYTES, key_material_problem
from dpstream.params import EngineConfig
from dpstream.run_setup import RunSetup
from transforms.keystats import KeyStats
from transforms.tick_timer import TickSchedule
from dpstream.clock import Partial


RELEASE_KEY = 0
IntKeyed = Tuple[int, Any]
PairKeyed = Tuple[Tuple[int, int], Any]


_HEX = re.compile(rb"[0-9a-fA-F]+")
_BASE64 = re.compile(rb"[A-Za-z0-9+/]+={0,2}")


def seed_material(data: bytes) -> Tuple[bytes, bytes, bool]:
    """(the seed, its key material, whether it was taken as raw bytes) of a seed file's contents: hex or
    base64 text (surrounding whitespace ignored) is key material by what it encodes, anything else is raw
    bytes taken whole (never stripped: ``head -c 32 /dev/urandom`` may end in a newline byte). The seed
    is the text itself, not its decoding, so a seed file gives the same noise as before the material was
    counted."""
    text = data.strip()
    if _HEX.fullmatch(text) and len(text) % 2 == 0:
        return bytes(text), bytes.fromhex(text.decode("ascii")), False
    if _BASE64.fullmatch(text) and len(text) % 4 == 0:
        try:
            return bytes(text), base64.b64decode(text, validate=True), False
        except binascii.Error:
            pass
    return bytes(data), bytes(data), True


def load_seed(path: str) -> bytes:
    """The secret master seed from a file (local path or any Beam filesystem URL): at least
    ``MIN_SEED_BYTES`` (32) bytes of key material, raw or as hex or base64 text."""
    with FileSystems.open(path) as fh:
        data = fh.read()
    seed, material, raw = seed_material(data)
    problem = key_material_problem(material, raw_text=raw)
    if problem is not None:
        raise ValueError(f"the seed file {path} holds {problem}: such a seed can be searched for offline "
                         f"(and checked against the releases). Make one with "
                         f"`head -c 32 /dev/urandom > {path}` (or `head -c 32 /dev/urandom | base64 > {path}`)")
    return seed


def as_partial(points, dim: int) -> Partial:
    if isinstance(points, Partial):
        return points
    pts = np.asarray(points, dtype=np.float64).reshape(-1, dim)
    m = pts.shape[0]
    return Partial(pts, np.full(m, -1, np.int64), np.full(m, np.nan), np.array([""] * m, dtype=str))


def row_blocks(x, sizes) -> list:
    """Views of consecutive row blocks of ``x`` of the given sizes (plain slices: ``np.split`` costs
    ~1.5 µs a piece, and a batch message holds ~1,000 ticks)."""
    ends = np.cumsum(sizes).tolist()
    return [x[a:b] for a, b in zip([0] + ends[:-1], ends)]


_PARTIAL_DTYPES = ("<f8", "<i8", "<f8")


def compact_points(x: np.ndarray) -> np.ndarray:
    """``x`` as float32 when every value is one (float32 input read as float64: embeddings, images), else ``x``
    itself: the same numbers in half the bytes, for the messages and states that carry raw points (the
    shuffles into ShardTicks, RouteByEpoch and AssignRings: ~0.3 GB each at 10⁵ × 384 as float64; the
    points are clipped only in AssignRings so that all three carry float32, docs/beam-graph.md). Lossless: a
    finite float64 equal to its float32 is that float32 widened, bit for bit, and numpy widens a float32
    operand before any float64 arithmetic, so a consumer computes on the very numbers it would have had.
    A sample decides first, so data that are not float32 pay almost nothing."""
    if x.dtype != np.float64 or x.size == 0:
        return x
    head = x[:8]
    if not np.array_equal(head.astype(np.float32), head):
        return x
    y = x.astype(np.float32)
    return y if np.array_equal(y, x) else x


def partial_bytes(part: Partial):
    """A partial batch as ``(m, d, points dtype, mids dtype, buffer)``: its four arrays' bytes in one
    ``uint8`` array (what crosses the shuffle into ShardTicks and waits in its bag; ~8,000 of them per run at
    n = 1e6), the points as :func:`compact_points` gives them. Pickling the four small arrays cost ~54 µs a
    partial, this a few. A partial with other dtypes (or object ids) is returned as it is."""
    arrs = (part.points, part.slots, part.ts)
    if tuple(a.dtype.str for a in arrs) != _PARTIAL_DTYPES or part.mids.dtype.kind != "U" or part.points.ndim != 2:
        return part
    m, d = part.points.shape
    pts = compact_points(part.points)
    parts = [np.ascontiguousarray(a) for a in (pts,) + arrs[1:] + (part.mids,)]
    # one copy of each array (tobytes and then a join copied it twice), into an array, which wire() sends
    # out of band: the receiver's partial is views of the bytes it received
    buf, at = np.empty(sum(a.nbytes for a in parts), np.uint8), 0
    for a in parts:
        buf[at:at + a.nbytes] = a.reshape(-1).view(np.uint8)
        at += a.nbytes
    return m, d, pts.dtype.str, part.mids.dtype.str, buf


def partial_from_bytes(packed) -> Partial:
    """The inverse of :func:`partial_bytes` (arrays over the buffer; float32 points stay float32 until
    ``AssignRings`` clips them)."""
    if isinstance(packed, Partial):
        return packed
    m, d, pts_dtype, mids_dtype, buf = packed
    pts_dtype = np.dtype(pts_dtype)
    pts = np.frombuffer(buf, pts_dtype, m * d).reshape(m, d)
    at = m * d * pts_dtype.itemsize
    slots = np.frombuffer(buf, np.int64, m, at)
    ts = np.frombuffer(buf, np.float64, m, at + 8 * m)
    mids = np.frombuffer(buf, np.dtype(mids_dtype), m, at + 16 * m)
    return Partial(pts, slots, ts, mids)


# --------------------------------------------------------------------------- shared per process

def wire(value) -> bytes:
    """One message between two stages: its value pickled once, as bytes.

    Beam's coder writes bytes as they are (a length and the buffer); any other object it pickles, which
    copied every array of a message once more on each side of the shuffle (a Python wrapper that kept its
    own pickle still went through the outer one: measured on a shard's 12,500 × 384 points, 38 MB, encoding
    and decoding took 0.124 s as a wrapper, 0.086 s as bytes). The
    pickle is made once per message and the same bytes go to every key that needs them (EpochPlan and
    EpochClose broadcast to every shard) and into every buffer the runner encodes them for. A stage that
    only keeps a message in a bag (``ShardTicks``) keeps the bytes it came as; :func:`open_msg` unpickles.

    A message with a large array (:data:`OUT_OF_BAND_BYTES` or more) is framed (:func:`frame`): the pickle
    without the large arrays' data, then that data, so that :func:`open_msg` gives those arrays as views of
    the received bytes instead of one more copy of every point on each hop. The pickler asks about each
    array as it meets it, so a message is pickled once whichever way it goes."""
    bufs = []

    def in_band(buf) -> bool:  # pickle protocol 5: a true answer keeps the buffer inside the pickle
        if buf.raw().nbytes < OUT_OF_BAND_BYTES:
            return True
        bufs.append(buf)
        return False

    head = pickle.dumps(value, protocol=5, buffer_callback=in_band)
    return frame(head, bufs) if bufs else head


# an array of fewer bytes stays inside the pickle (framing it would buy nothing: its copy costs a few µs)
OUT_OF_BAND_BYTES = 1 << 16
_FRAME = b"DPW1"  # a pickle starts with b"\x80": the two kinds of message cannot be confused
_ALIGN = 64


def frame(head: bytes, bufs) -> bytes:
    """``_FRAME``, the number of buffers, the pickle's length and each buffer's length (8 bytes each), the
    pickle, then each buffer's data at a multiple of 64 bytes: one copy of every array, into one bytes
    (``bytes.join``, which sizes its result first)."""
    views = [b.raw() for b in bufs]  # PickleBuffers: each a contiguous buffer, as bytes
    sizes = [len(head)] + [v.nbytes for v in views]
    at = len(_FRAME) + 8 * (1 + len(sizes))
    pieces = [_FRAME, np.array([len(views)] + sizes, dtype="<u8").tobytes()]
    for v in [memoryview(head)] + views:
        pad = -at % _ALIGN
        if pad:
            pieces.append(bytes(pad))
        pieces.append(v)
        at += pad + v.nbytes
    return b"".join(pieces)


def unframe(data: bytes):
    """The value of a :func:`frame`d message, its arrays views of ``data`` (read-only: a stage copies
    what it changes)."""
    mv = memoryview(data)
    nb = int.from_bytes(mv[4:12], "little")
    sizes = np.frombuffer(mv, "<u8", nb + 1, 12).tolist()
    at = 12 + 8 * (nb + 1)
    parts = []
    for n in sizes:
        at += -at % _ALIGN
        parts.append(mv[at:at + n])
        at += n
    return pickle.loads(parts[0], buffers=parts[1:])


def load_state(state):
    """A stage's state value: stored as one pickle (bytes), so the runner's state cache sizes one
    object instead of walking every array of it on each read and write."""
    raw = state.read()
    return None if raw is None else pickle.loads(raw)


def store_state(state, value) -> None:
    state.write(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def open_msg(item):
    """A message's value (:func:`wire`); anything else (the start marker) as it is."""
    if not isinstance(item, bytes):
        return item
    return unframe(item) if item[:4] == _FRAME else pickle.loads(item)


_PLANS: dict = {}


class RunContext(RunSetup):
    """What every stage of one run shares (:class:`dpstream.run_setup.RunSetup`: noise, privacy plan, A,
    M), rebuilt on each worker (never pickled), the privacy plan cached per process (built once)."""

    def __init__(self, cfg: EngineConfig, seed: bytes, run: int):
        super().__init__(cfg, seed, run, plans=_PLANS)


class ClusterJob:
    """The public shape of a job's clustering stages (picklable: no seed)."""

    def __init__(self, cfg: EngineConfig, seed_path: str, n_shards: int, schedule: TickSchedule,
                 end: Optional[int] = None):
        if cfg.part_fire_rate:  # the rings' release weights per (ring, part) do not reach the job's ring keys
            raise ValueError("part_fire_rate is not available in the Beam job (the library engine only): "
                             "run part_fire without it")
        self.cfg, self.seed_path, self.n_shards, self.schedule = cfg, seed_path, int(n_shards), schedule
        self.end = None if end is None else int(end)  # the declared end's global tick (public), None: none
        self.T = cfg.horizon_ticks
        self.n_rings = cfg.n_rings
        self.n_epochs = rules.max_epochs(cfg.horizon_ticks)
        self.release_log = False  # True: release dicts as lines of a release log (dpstream/release_log.py)

    def split(self, g: int):
        """Global tick g (1-based) → (run, tick within the run)."""
        return (g - 1) // self.T, (g - 1) % self.T + 1

    def glob(self, r: int, t: int) -> int:
        return r * self.T + t

    def ends_at(self, r: int, t: int) -> bool:
        """Is tick t of run r the stream's declared end (``--end_at_input_end``)?"""
        return self.end is not None and self.glob(r, t) == self.end

    def last_tick(self, r: int) -> int:
        """The last tick of run r: T, or the declared end's tick in the run it ends."""
        if self.end is not None and self.split(self.end)[0] == r:
            return self.split(self.end)[1]
        return self.T


def measured(fn):
    """Run a DoFn method to the end before Beam sees its outputs, so that a key's CPU time
    (:mod:`transforms.keystats`, benchmark only) is its own work, not the downstream encoding."""
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        t0 = self._stats.start()
        outs = list(fn(self, *args, **kwargs) or ())
        self._stats.close(t0)
        return outs
    return wrapper


class StageFn(beam.DoFn):
    """Seed, per-run objects and key telemetry of a stage."""

    STAGE = "stage"

    def __init__(self, job: ClusterJob, label: str = None):
        self.job = job
        self.label = label or self.STAGE

    def setup(self):
        self._seed = load_seed(self.job.seed_path)
        self._runs = OrderedDict()
        self._stats = KeyStats(self.label)

    def run(self, r: int) -> RunContext:
        ctx = self._runs.get(r)
        if ctx is None:
            ctx = self._runs[r] = RunContext(self.job.cfg, self._seed, r)
            while len(self._runs) > 2:
                self._runs.popitem(last=False)
        return ctx

    def finish_bundle(self):
        self._stats.flush()

    def teardown(self):
        if hasattr(self, "_stats"):
            self._stats.flush()
