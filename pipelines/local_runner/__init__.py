"""Workarounds for Beam's local runners, applied together by :func:`install`.

Each module patches private Beam code whose cost or loss was measured on the local runners (the
BundleBasedDirectRunner of a stream, the in-process SDK worker of a batch run); its docstring gives
the measurement and why no element, state or timer changes:

* :mod:`.specs` — the per-bundle DoFn introspection, memoised;
* :mod:`.metrics` — the user counters of streaming bundles, no longer lost;
* :mod:`.pubsub` — the local Pub/Sub reader's 10-message pulls, widened;
* :mod:`.statecache` — the state cache's ~1 ms sizing of each state cell, cheapened;
* :mod:`.keys` — keys left with no state and no timer, dropped;
* :mod:`.holds` — the privacy-unit stage's pending timers hold its output watermark;
* :mod:`.sampler` — the in-process worker's wait of up to 200 ms at the end of every bundle, shortened;
* :mod:`.options` — the pipeline options' views, which graph construction rebuilds ~480 times, memoised.

Private code changes between Beam releases without notice, so the patches run only on the Beam
versions they were measured on (:data:`MEASURED_ON`) and only for a local runner. Elsewhere
:func:`install` skips all of them and logs why: the job stays correct without them (they change
speed and operator counters, never a release), it only loses what they fix. To support a new Beam
version, re-run the tests of ``tests/beam/test_local_runner.py`` and the streaming tests on it,
re-check each patched function's source, then add the version here.
"""
from __future__ import annotations

import logging
from typing import NamedTuple, Optional, Tuple

from pipelines.local_runner import holds, keys, metrics, options, pubsub, sampler, specs, statecache

# major.minor versions of apache-beam the patches were measured and tested on (setup.py pins this range)
MEASURED_ON = ((2, 77),)

# runners that execute on this machine through the patched code (the DirectRunner family and the
# in-process portable worker); a name may come with its module path (apache_beam.runners....Name)
LOCAL_RUNNERS = ("DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner", "FnApiRunner",
                 "PrismRunner", "TestDirectRunner")

# in the order they are applied; each install() is idempotent
WORKAROUNDS = (("specs", specs.install), ("metrics", metrics.install), ("pubsub", pubsub.install),
               ("statecache", statecache.install), ("keys", keys.install), ("holds", holds.install),
               ("sampler", sampler.install), ("options", options.install))

log = logging.getLogger("dpstream")


class Installed(NamedTuple):
    """What :func:`install` did: the workarounds it applied, or why it applied none."""
    applied: Tuple[str, ...]
    skipped: Optional[str] = None


def runner_name(runner) -> str:
    """A runner given as a name (``DirectRunner``, ``apache_beam.runners....BundleBasedDirectRunner``)
    or as a runner object (``Pipeline.runner``) → its class name."""
    if runner is None:
        return "DirectRunner"  # Beam's default
    name = runner if isinstance(runner, str) else type(runner).__name__
    return name.split(".")[-1]


def version_tuple(version: str) -> Tuple[int, int]:
    """``"2.77.0"`` (or ``"2.78.0rc1"``, ``"2.79.0.dev"``) → ``(2, 77)``; ``(0, 0)`` when unreadable."""
    parts = str(version).split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or "x")
    except (IndexError, ValueError):
        return 0, 0


def measured(beam_version: str) -> bool:
    return version_tuple(beam_version) in MEASURED_ON


def install(runner, beam_version: Optional[str] = None) -> Installed:
    """Apply every workaround when ``runner`` is a local runner and ``beam_version`` (default: the
    installed apache-beam) is one they were measured on; otherwise apply none and log the reason."""
    name = runner_name(runner)
    if name not in LOCAL_RUNNERS:
        return Installed((), f"{name} is not a local runner: the local-runner workarounds do not apply")
    if beam_version is None:
        import apache_beam
        beam_version = apache_beam.__version__
    if not measured(beam_version):
        seen = ", ".join(f"{a}.{b}" for a, b in MEASURED_ON)
        why = (f"apache-beam {beam_version} is not a version the local-runner workarounds were measured on "
               f"({seen}): none applied; a local run may be slower and, streaming, under-count the operator "
               f"counters (releases are unaffected)")
        log.warning("dpstream: %s", why)
        return Installed((), why)
    for _, fn in WORKAROUNDS:
        fn()
    return Installed(tuple(n for n, _ in WORKAROUNDS))
