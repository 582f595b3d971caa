"""Beam's Google Cloud support (Dataflow submission, gs:// paths) is the ``dpstream[gcp]`` extra.

It is not a dependency because ``import apache_beam`` loads the Dataflow, BigQuery, Cloud Storage … clients
whenever they are installed, a third of a second of every local run's start that no local run uses. Without
the extra Beam would fail late and obscurely: an ImportError deep in the Dataflow runner, or "no filesystem
for scheme gs", which a file glob reports as matching no file. These checks name what to install instead,
before anything runs.
"""
from __future__ import annotations

import importlib.util
import logging
from typing import Iterable, List, Optional

from pipelines.job.options import OptionError

INSTALL = "pip install 'dpstream[gcp]'"
# what Beam's Dataflow runner (google.cloud.dataflow) and its gs:// filesystem (google.cloud.storage) import
MODULES = ("google.cloud.dataflow", "google.cloud.storage")
GCP_RUNNERS = ("DataflowRunner", "TestDataflowRunner")


def missing_modules() -> List[str]:
    """The extra's modules that cannot be imported here (found without importing them)."""
    gone = []
    for name in MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError:  # not even the google.cloud namespace
            found = False
        if not found:
            gone.append(name)
    return gone


def is_gcs(path: Optional[str]) -> bool:
    return bool(path) and str(path).startswith("gs://")


def require(what: str) -> None:
    """OptionError naming ``what`` and the install command when the extra is missing."""
    gone = missing_modules()
    if gone:
        raise OptionError(f"{what} needs Beam's Google Cloud support, which is not installed "
                          f"(no {', '.join(gone)}): {INSTALL}")


def check_job(job) -> None:
    """At launch, before Beam is imported: a Dataflow runner or a gs:// path of the job needs the extra."""
    runner = (job.runner or "").split(".")[-1]
    if runner in GCP_RUNNERS:
        require(f"--runner={runner}")
    for option, path in (("--input", job.input), ("--output", job.output), ("--dead_letter", job.dead_letter),
                         ("--seed_file", job.seed_file), ("--seed_registry", job.seed_registry)):
        if is_gcs(path):
            require(f"{option} {path}")


class _QuietMissingExtra(logging.Filter):
    """Without the extra ``import apache_beam`` warns that it cannot load the gs:// filesystem and the BigQuery
    client: a local run uses neither, and a run that would is refused first with what to install."""

    PREFIXES = ("Failed to import GCSFileSystem", "apitools not found")

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.WARNING and str(record.msg).startswith(self.PREFIXES))


QUIET_MISSING_EXTRA = _QuietMissingExtra()


def quiet_missing_extra(handlers: Iterable[logging.Handler]) -> List[logging.Handler]:
    """Hide those two warnings on ``handlers`` while the extra is missing (with it, Beam's warnings about
    these modules are real problems and stay); returns the handlers given the filter, to remove it from."""
    if not missing_modules():
        return []
    handlers = list(handlers)
    for h in handlers:
        h.addFilter(QUIET_MISSING_EXTRA)
    return handlers
