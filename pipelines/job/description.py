"""What one run of the job is: a frozen :class:`Job`, built once from the options (:mod:`pipelines.job.arguments`).

The clustering's public parameters live in the engine's own :class:`~dpstream.params.EngineConfig`, which
the job holds (``job.cfg``) rather than copies: the graph, the seed registry, the plan and the equivalence
tests all read that one object, so the job cannot drift from the library it must equal. ``job.k``,
``job.radius``, …, ``job.unit`` are read-only views of it. Beside it sit what only the job has: where
records come from and go, the tick clock, how records are read, the runner.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from pipelines import unit_options
from pipelines.job.options import DEFAULT_POINT_SHARDS, DEFAULT_SKEW, OptionError

if TYPE_CHECKING:
    from dpstream.params import EngineConfig

LOCAL_RUNNERS = ("DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner", "FnApiRunner", "PrismRunner")
# the runners whose one worker process runs every key of a stage in turn, on one thread (``--direct_num_workers``
# above 1 is FnApiRunner's multi_processing; Prism runs its own workers)
IN_PROCESS_RUNNERS = ("DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner", "FnApiRunner")
KNOWN_RUNNERS = LOCAL_RUNNERS + ("DataflowRunner", "FlinkRunner", "SparkRunner", "PortableRunner",
                                 "InteractiveRunner", "TestDataflowRunner", "TestDirectRunner")
# the neighbouring relation each clock protects (docs/privacy.md): a position clock's slots are public, so
# one record is replaced; an event-time tick holds whoever arrived, so one record is added or removed
NEIGHBOURING = {"position": "replace_one", "event_time": "add_remove"}


@dataclass(frozen=True)
class Job:
    """One run of the job, as the options describe it; built once, never changed (a launch, the graph,
    the summary and the report all read the same description)."""

    cfg: "EngineConfig"         # the clustering's public parameters (k, d, Λ, ε, δ, T, runs, …), the engine's own
    source: str                 # "files" | "pubsub" | "builtin"
    input: Optional[str]
    subscription: Optional[str]
    topic: Optional[str]
    fmt: Optional[str]
    builtin_n: int
    output: Optional[str]
    output_topic: Optional[str]
    dead_letter: str
    seed_file: Optional[str]
    seed_registry: Optional[str]
    clock: str                  # "position" | "event_time"
    tick_size: Optional[int]
    tick_seconds: Optional[float]
    t_start: Optional[int]      # the event-time clock's index of tick 1: floor(start time / tick_seconds)
    allowed_lateness_seconds: Optional[float]
    streaming: bool
    runner: str
    report: bool
    t_start_given: bool = True  # False: --t_start defaulted to the launch time (Pub/Sub)
    csv_header: bool = False
    files: Optional[tuple] = None  # file input: the FileSpecs checked at launch (path, slot offset, format, header)
    n_slots: Optional[int] = None  # file input: the records (slots) the files hold — public under replace-one
    notes: Optional[tuple] = None  # launch-time hints for the operator
    max_clock_skew_seconds: float = DEFAULT_SKEW  # Pub/Sub: payload ts vs publish time, and clocks vs each other
    point_shards: int = DEFAULT_POINT_SHARDS  # keys of the per-point stages (public; releases do not depend on it)
    tick_timer: str = "batch"  # "batch" (one firing) | "looping" (one per tick; streaming)
    columns: Optional[tuple] = None  # --columns: names or indexes (pipelines.formats)
    csv_columns: Optional[tuple] = None  # --columns resolved to CSV field indexes at launch
    csv_id_column: Optional[int] = None  # --privacy_id_field resolved to a CSV field index at launch
    delimiter: str = ","
    ts_unit: str = "s"
    max_dead_letter_fraction: float = 0.5  # pipelines.exit_codes
    plan_only: bool = False
    full_coresets: bool = False  # --output: every line holds its coreset (no release-log references)
    end_at_input_end: bool = False  # --end_at_input_end: the input's last tick is the stream's declared end

    # the engine's parameters under the job's option names
    k = property(lambda self: self.cfg.n_clusters, doc="--k: the number of centers")
    dim = property(lambda self: self.cfg.dim, doc="--dim: the points' dimension d")
    radius = property(lambda self: self.cfg.radius, doc="--radius: the public radius Λ of the data ball")
    center = property(lambda self: self.cfg.center, doc="--center: the data ball's center (None: the origin)")
    objective = property(lambda self: self.cfg.objective, doc="--objective: kmeans or kmedian")
    semicoreset = property(lambda self: self.cfg.semicoreset, doc="--semicoreset: tree, lloyd or snap")
    epsilon = property(lambda self: self.cfg.epsilon, doc="--epsilon: the run's total ε")
    delta = property(lambda self: self.cfg.delta, doc="--delta: the run's total δ")
    horizon_ticks = property(lambda self: self.cfg.horizon_ticks, doc="--horizon_ticks: T, the ticks of one run")
    runs = property(lambda self: self.cfg.runs, doc="--runs: consecutive runs of T ticks (None: unbounded)")
    window_runs = property(lambda self: self.cfg.window_runs, doc="--window_runs: closed runs in window_centers")
    bucket_shards = property(lambda self: self.cfg.bucket_shards, doc="--bucket_shards: keys per (tree, level)")

    @property
    def unit(self) -> Optional[dict]:
        """The privacy unit as the options gave it (:func:`pipelines.unit_options.unit_of`; None: one record
        is the unit), read from the engine's ``cfg.unit``: the id field's name (where the job reads a
        record's id) and the bounds the engine enforces."""
        u = self.cfg.unit
        if u.max_contributions is None:
            return None
        return {"privacy_unit": u.privacy_unit, "max_contributions": u.max_contributions,
                "max_contributions_per_tick": u.max_contributions_per_tick, "contribution": u.contribution.value}

    @property
    def local(self) -> bool:
        """Runs on a local runner (where the local-runner workarounds apply)."""
        return self.runner.split(".")[-1] in LOCAL_RUNNERS

    @property
    def total_ticks(self) -> Optional[int]:
        """Ticks of the whole job: runs × T (the clock's horizon); None with unbounded runs."""
        return None if self.runs is None else self.runs * self.horizon_ticks

    @property
    def end_tick(self) -> Optional[int]:
        """``--end_at_input_end``: the input's last global tick, ceil(records / tick_size) — the slot count is
        public under replace-one (the position clock) — when it comes before the horizon's last tick; None
        otherwise (the horizon ends the stream there anyway), or before the files were counted."""
        if not self.end_at_input_end or self.clock != "position":
            return None
        slots = self.builtin_n if self.source == "builtin" else self.n_slots
        if slots is None:
            return None
        g = max(1, -(-int(slots) // int(self.tick_size)))
        return g if self.total_ticks is None or g < self.total_ticks else None

    @property
    def releases_path(self) -> Optional[str]:
        return None if self.output is None else join(self.output, "releases.jsonl")


def join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name


def make_config(*, k, dim, radius, center, objective, semicoreset, epsilon, delta, horizon_ticks, runs,
                window_runs, bucket_shards, clock: str, unit: Optional[dict],
                part_fire: Optional[float] = None) -> "EngineConfig":
    """The engine's configuration from the job's options (the engine checks k, ε, δ, radius …: its
    message becomes an :class:`OptionError`). ``part_fire`` None: the engine's default."""
    from dpstream.params import EngineConfig

    extra = {} if part_fire is None else {"part_fire": part_fire}
    try:
        return EngineConfig(n_clusters=k, dim=dim, radius=radius, epsilon=epsilon, delta=delta,
                            horizon_ticks=horizon_ticks, runs=runs, window_runs=window_runs,
                            neighbouring=NEIGHBOURING[clock], objective=objective, semicoreset=semicoreset,
                            center=center, bucket_shards=bucket_shards, **unit_options.engine_kwargs(unit),
                            **extra)
    except ValueError as e:
        raise OptionError(str(e)) from None


def engine_config(job: Job) -> "EngineConfig":
    """The engine's configuration for a job (the same object the equivalence test builds)."""
    return job.cfg
