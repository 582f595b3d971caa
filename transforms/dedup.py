"""``DedupByMessageId``: Pub/Sub redeliveries counted once (P4).

Split from :mod:`transforms.ticks` (the clock and the tick batches): a record's message id and publish
time decide whether it was seen before; :func:`redelivery_window` derives, from public parameters
only, how long an id is remembered and when a record is too old to be told from a forgotten
redelivery. Three forms: a GroupByKey on bounded input, a stateful DoFn per message id on a stream
and, for runners that scan every key with a timer (the local BundleBasedDirectRunner), the same rule
with the ids held in a few hashed keys.
"""
from __future__ import annotations

import math
import numbers
import zlib
from typing import Any, Callable, Optional, Tuple

import numpy as np

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.coders import BooleanCoder, PickleCoder
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.utils.timestamp import Duration, Timestamp

from dpstream.clock import MICROS
from transforms.records import as_seconds
from transforms.ticks import stage_counter


def _record_order_key(r) -> tuple:
    """A deterministic order on records (for 'the first' of identical redeliveries)."""
    slot = getattr(r, "slot", None)
    ts = getattr(r, "ts", None)
    raw = getattr(r, "raw", None)
    if isinstance(raw, np.ndarray):
        b = raw.tobytes()
    elif isinstance(raw, str):
        b = raw.encode("utf-8", "surrogatepass")
    elif isinstance(raw, (bytes, bytearray)):
        b = bytes(raw)
    else:
        b = repr(raw).encode("utf-8", "surrogatepass")
    return (-1 if slot is None else slot, -math.inf if not isinstance(ts, (int, float)) else float(ts), b)


class _SplitByMessageIdFn(beam.DoFn):
    NO_ID = "without_message_id"

    def __init__(self, label_prefix: str):
        self.label_prefix = label_prefix

    def setup(self):
        self._c = stage_counter(self.label_prefix, "without_message_id")

    def process(self, element):
        mid = getattr(element, "message_id", None)
        if mid is None:
            self._c.inc()
            yield pvalue.TaggedOutput(self.NO_ID, element)
        else:
            # a redelivery keeps its id *and* its publish time; keying on both keeps a message whose
            # id a restarted Pub/Sub (the emulator numbers from 1 again) reused (measured)
            ts = getattr(element, "ts", None)
            yield (str(mid) if ts is None else f"{mid}@{float(ts)!r}", element)


class _FirstPerKeyFn(beam.DoFn):
    def __init__(self, label_prefix: str):
        self.label_prefix = label_prefix

    def setup(self):
        self._c = stage_counter(self.label_prefix, "redeliveries_dropped")

    def process(self, element):
        _, recs = element
        recs = list(recs)
        if len(recs) > 1:
            self._c.inc(len(recs) - 1)
        yield min(recs, key=_record_order_key)


def redelivery_window(tick_seconds: float, close_delay_seconds: float,
                      max_clock_skew_seconds: float) -> Tuple[float, float]:
    """``(ttl_seconds, max_age_seconds)`` of the stateful :class:`DedupByMessageId` for a stream
    whose ticks last ``tick_seconds`` and whose closing stage (``ClusterTicks``) closes tick k
    ``close_delay_seconds`` after its end (the job: ``allowed_lateness_seconds`` + two panes),
    with clocks that agree within ``max_clock_skew_seconds`` (all public)::

        max_age = tick_seconds + close_delay_seconds + max_clock_skew_seconds
        ttl     = max_age + max_clock_skew_seconds

    Why. A message published at P (the server's clock) has ``ts ≤ P + skew`` (``ParsePoints``
    dead-letters a later ts: ``ts_in_future``), so its tick ends by ``ts + tick_seconds ≤ P +
    skew + tick_seconds`` and its public close time (tick end + close delay) is at most
    ``P + max_age``: that is the whole time the message can still be admitted into an open tick. The dedup drops (``after_dedup_ttl``) a record that
    reaches it at or after ``P + max_age`` by the worker's clock, and remembers a message for
    ``ttl`` after it first saw it, which was at or after ``P − skew`` by the worker's clock (the
    worker's and the server's clocks agree within the skew). A redelivery after the ttl arrives
    at or after ``P − skew + ttl = P + max_age``: past its tick's close, and dropped. So a message
    counts at most once, whatever the watermark does. The state holds (message rate × ttl) ids."""
    for name, v in (("tick_seconds", tick_seconds), ("close_delay_seconds", close_delay_seconds),
                    ("max_clock_skew_seconds", max_clock_skew_seconds)):
        if not (isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be finite and >= 0, got {v!r}")
    if not tick_seconds > 0:
        raise ValueError(f"tick_seconds must be > 0, got {tick_seconds!r}")
    max_age = float(tick_seconds) + float(close_delay_seconds) + float(max_clock_skew_seconds)
    return max_age + float(max_clock_skew_seconds), max_age


def _now_seconds(now_fn: Optional[Callable[[], float]]) -> float:
    return float(now_fn()) if now_fn is not None else Timestamp.now().micros / MICROS


class _DedupFnBase(beam.DoFn):
    """What the per-id and the bucketed dedup share: the public window and the counters."""

    def __init__(self, ttl_seconds: float, label_prefix: str, max_age_seconds: Optional[float] = None,
                 now_fn: Optional[Callable[[], float]] = None):
        self.ttl_seconds = ttl_seconds
        self.label_prefix = label_prefix
        self.max_age_seconds = max_age_seconds
        self.now_fn = now_fn

    def setup(self):
        self._c = stage_counter(self.label_prefix, "redeliveries_dropped")
        self._c_stale = stage_counter(self.label_prefix, "after_dedup_ttl")

    def too_old(self, rec, now: float) -> bool:
        """Reached this stage max_age_seconds or more after its publish time: too old to tell from a
        redelivery whose id was forgotten; its tick has closed anyway (redelivery_window). Counted."""
        if self.max_age_seconds is None:
            return False
        published = as_seconds(getattr(rec, "ts", None))[0]
        if published is not None and now >= published + self.max_age_seconds:
            self._c_stale.inc()
            return True
        return False


def _make_stateful_dedup_fn(timer_name: str):
    """A stateful DoFn class whose expiry timer has a pipeline-unique name (Beam's
    FnApiRunner mixes up timers that share a name across transforms: apache/beam#21995)."""
    seen_spec = userstate.ReadModifyWriteStateSpec("seen", BooleanCoder())
    expiry_spec = userstate.TimerSpec(timer_name, TimeDomain.REAL_TIME)

    class _StatefulDedupFn(_DedupFnBase):
        def process(self, element, seen=beam.DoFn.StateParam(seen_spec),
                    expiry=beam.DoFn.TimerParam(expiry_spec)):
            _, rec = element
            if seen.read():
                self._c.inc()
                return
            now = _now_seconds(self.now_fn)
            if self.too_old(rec, now):
                return
            seen.write(True)
            expiry.set(Timestamp(micros=int(round(now * MICROS))) + Duration(seconds=self.ttl_seconds))
            yield rec

        @userstate.on_timer(expiry_spec)
        def expire(self, seen=beam.DoFn.StateParam(seen_spec)):
            seen.clear()

    return _StatefulDedupFn


def _make_bucketed_dedup_fn(timer_name: str):
    """The stateful dedup with ids grouped in ``key_buckets`` keys (a stable hash of the id): each key
    holds ``{id: expiry}`` and one processing-time timer at its earliest expiry. Same rule as the
    per-id form — an id is remembered from first sight until at least ``ttl_seconds`` later, so a
    redelivery inside the ttl finds it — with a bounded number of keys: a runner that scans every key
    with a timer between bundles (the local BundleBasedDirectRunner) scans ``key_buckets``, not one per
    message id of the last ttl seconds."""
    ids_spec = userstate.ReadModifyWriteStateSpec("seen_ids", PickleCoder())
    expiry_spec = userstate.TimerSpec(timer_name, TimeDomain.REAL_TIME)

    class _BucketedDedupFn(_DedupFnBase):
        def process(self, element, ids=beam.DoFn.StateParam(ids_spec), expiry=beam.DoFn.TimerParam(expiry_spec)):
            _, (mid, rec) = element
            seen = ids.read() or {}
            if mid in seen:
                self._c.inc()
                return
            now = _now_seconds(self.now_fn)
            if self.too_old(rec, now):
                return
            until = int(round((now + self.ttl_seconds) * MICROS))
            if not seen:  # later ids expire later (the clock moves forward): the armed timer stays the earliest
                expiry.set(Timestamp(micros=until))
            seen[mid] = until
            ids.write(seen)
            yield rec

        @userstate.on_timer(expiry_spec)
        def expire(self, fired=beam.DoFn.TimestampParam, ids=beam.DoFn.StateParam(ids_spec),
                   expiry=beam.DoFn.TimerParam(expiry_spec)):
            now = max(int(fired.micros), int(round(_now_seconds(self.now_fn) * MICROS)))
            kept = {m: u for m, u in (ids.read() or {}).items() if u > now}
            if kept:
                ids.write(kept)
                expiry.set(Timestamp(micros=min(kept.values())))
            else:
                ids.clear()

    return _BucketedDedupFn


def _id_bucket(n_buckets: int):
    def bucket(kv):
        return zlib.crc32(kv[0].encode("utf-8", "surrogatepass")) % n_buckets, kv
    return bucket


class DedupByMessageId(beam.PTransform):
    """Drops Pub/Sub redeliveries: keeps one record per (``message_id``, ``ts``) (P4);
    the carrier's ts is the publish time, which a redelivery keeps.

    ``DedupByMessageId(mode="auto"|"batch"|"stateful", ttl_seconds=None, label_prefix="",
    timer_name=None, max_age_seconds=None, now_fn=None, key_buckets=None)``. Input: elements with a
    ``message_id`` attribute — apply it to :class:`~transforms.parse.Record`\\ s *before*
    ``ParsePoints`` and ``BatchIntoTicks`` (the rows of one numpy message share its
    id). Elements whose ``message_id`` is None pass through (counted
    ``without_message_id``).

    * ``batch`` (the default for bounded input): ``GroupByKey`` on the message id, keep
      the first record in a deterministic order; exact, state is the shuffle.
    * ``stateful`` (the default for unbounded input): a stateful DoFn keyed by the
      message id remembers it for ``ttl_seconds`` of **processing time** (a REAL_TIME
      timer, not the watermark, so other records cannot shorten it); ``ttl_seconds`` is
      required. With ``max_age_seconds`` it also drops (``after_dedup_ttl``) a record that
      reaches it ``max_age_seconds`` or more after its publish time (``ts``) by this
      stage's clock (``now_fn``; default ``Timestamp.now()``). Take both from
      :func:`redelivery_window` (what the job does): a redelivery then either finds its
      id remembered or is too old to be admitted, so it never counts twice, whatever the
      tick length (a fixed ttl shorter than a tick let a redelivery into a tick that was
      still open). State is bounded by (message rate × ttl). On the DirectRunner a
      REAL_TIME timer sends the pipeline to the BundleBasedDirectRunner. Pub/Sub's
      publisher-side ``id_label`` (against client retries) is a source option that the
      DirectRunner does not support.

      ``key_buckets`` B (stateful mode): the ids are held in B keys by a stable hash instead of one
      key each (:func:`_make_bucketed_dedup_fn`; same rule). The job uses it on the local runner,
      which scans every key with a timer between bundles; on Dataflow or Flink one key per id
      spreads best (the default, None).
    """

    MODES = ("auto", "batch", "stateful")

    def __init__(self, mode: str = "auto", ttl_seconds: Optional[float] = None, label_prefix: str = "",
                 timer_name: Optional[str] = None, label: Optional[str] = None,
                 max_age_seconds: Optional[float] = None, now_fn: Optional[Callable[[], float]] = None,
                 key_buckets: Optional[int] = None):
        super().__init__(label)
        if key_buckets is not None and not (isinstance(key_buckets, numbers.Integral) and 1 <= key_buckets <= 2**20):
            raise ValueError(f"key_buckets must be an integer in [1, 2^20] or None, got {key_buckets!r}")
        self.key_buckets = None if key_buckets is None else int(key_buckets)
        if mode not in self.MODES:
            raise ValueError(f"mode must be one of {self.MODES}, got {mode!r}")
        for name, v in (("ttl_seconds", ttl_seconds), ("max_age_seconds", max_age_seconds)):
            if v is not None and not (isinstance(v, numbers.Real) and not isinstance(v, bool)
                                      and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be finite and > 0, got {v!r}")
        if mode == "stateful" and ttl_seconds is None:
            raise ValueError("the stateful mode needs ttl_seconds (and max_age_seconds): take them from "
                             "redelivery_window(tick_seconds, close_delay_seconds, max_clock_skew_seconds)")
        self.mode = mode
        self.ttl_seconds = None if ttl_seconds is None else float(ttl_seconds)
        self.max_age_seconds = None if max_age_seconds is None else float(max_age_seconds)
        self.now_fn = now_fn
        self.label_prefix = label_prefix
        self.timer_name = timer_name or f"dpstream_dedup_expiry_{label_prefix or 'default'}"

    def expand(self, pcoll):
        mode = self.mode
        if mode == "auto":
            mode = "batch" if pcoll.is_bounded else "stateful"
        if mode == "stateful" and self.ttl_seconds is None:
            raise ValueError("DedupByMessageId on unbounded input needs ttl_seconds (and max_age_seconds): take "
                             "them from redelivery_window(tick_seconds, close_delay_seconds, "
                             "max_clock_skew_seconds)")
        split = pcoll | "SplitById" >> beam.ParDo(_SplitByMessageIdFn(self.label_prefix)).with_output_types(
            Tuple[str, Any]).with_outputs(
            _SplitByMessageIdFn.NO_ID, main="keyed")
        if mode == "batch":
            kept = (split.keyed | "GroupById" >> beam.GroupByKey()
                    | "FirstPerId" >> beam.ParDo(_FirstPerKeyFn(self.label_prefix)))
        elif self.key_buckets is None:
            fn_cls = _make_stateful_dedup_fn(self.timer_name)
            kept = split.keyed | "FirstPerIdStateful" >> beam.ParDo(
                fn_cls(self.ttl_seconds, self.label_prefix, self.max_age_seconds, self.now_fn))
        else:
            fn_cls = _make_bucketed_dedup_fn(self.timer_name)
            kept = (split.keyed | "IdBucket" >> beam.Map(_id_bucket(self.key_buckets)).with_output_types(
                Tuple[int, Any])
                    | "FirstPerIdBucketed" >> beam.ParDo(
                        fn_cls(self.ttl_seconds, self.label_prefix, self.max_age_seconds, self.now_fn)))
        return (kept, split[_SplitByMessageIdFn.NO_ID]) | "Merge" >> beam.Flatten()
