"""The job's options for reading one's own data and for judging a run, wired into the parser in one place.

``--columns``, ``--delimiter``, ``--ts_unit`` (how a record becomes a point: :mod:`pipelines.formats`),
``--max_dead_letter_fraction`` (when a finished batch run exits :data:`~pipelines.exit_codes.EXIT_USELESS`),
``--plan_only`` (print the privacy plan and sizes without reading data: :mod:`dpstream.planning`) and
``--version``. All are public parameters.
"""
from __future__ import annotations

import argparse

from pipelines.exit_codes import DEFAULT_MAX_DEAD_LETTER_FRACTION


def version() -> str:
    try:
        from importlib.metadata import version as v
        return v("dpstream")
    except Exception:  # not installed as a package: the source tree's own
        return "unknown"


def add_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--version", action="version", version=f"dpstream {version()}")
    g = ap.add_argument_group("your data (public reading rules)")
    g.add_argument("--columns", help="the fields that make a point, in order: CSV header names (implies "
                                     "--csv_header) or 0-based indexes; Parquet column names (default: every "
                                     "numeric column); JSON keys ({\"lat\": …, \"lon\": …}) or indexes into \"x\". "
                                     "--dim defaults to their number")
    g.add_argument("--delimiter", help="the CSV field delimiter: one character, e.g. ';' or '\\t' (default ',')")
    g.add_argument("--ts_unit", default="s", choices=("s", "ms", "us"),
                   help='the unit of numeric JSON "ts" fields: s (seconds since the epoch), ms or us; an ISO 8601 '
                        'string with a zone is read as is (default s)')
    g.add_argument("--max_dead_letter_fraction", type=float, default=DEFAULT_MAX_DEAD_LETTER_FRACTION,
                   help="a batch run that dead-letters more than this share of the records it read exits with "
                        f"code 3 after its summary (default {DEFAULT_MAX_DEAD_LETTER_FRACTION:g})")
    g.add_argument("--plan_only", action="store_true",
                   help="print the privacy plan, the block size, the first tick whose release reflects a full "
                        "block, and the state bound, then exit without reading data")


def prepare(ns) -> None:
    """Before the job's own checks: parse ``--columns``; ``--dim`` defaults to their number."""
    from pipelines.formats import parse_columns, parse_delimiter

    ns.columns = parse_columns(ns.columns)
    ns.delimiter = parse_delimiter(ns.delimiter)
    if ns.columns is not None and ns.dim is None:
        ns.dim = len(ns.columns)
    if ns.columns is not None and isinstance(ns.columns[0], str) and getattr(ns, "input", None) \
            and str(ns.input).lower().endswith(".csv"):
        ns.csv_header = True  # names come from the header line, which keeps no slot


def apply(job, ns) -> None:
    """Copy the options onto the parsed job and check them (ValueError with the fix)."""
    from transforms.text_formats import TextOptions

    frac = ns.max_dead_letter_fraction
    if not 0 <= frac <= 1:
        raise ValueError(f"--max_dead_letter_fraction must be in [0, 1], got {frac}")
    if ns.columns is not None and len(ns.columns) != job.dim:
        raise ValueError(f"--columns names {len(ns.columns)} column(s) but --dim is {job.dim}")
    job.columns, job.delimiter, job.ts_unit = ns.columns, ns.delimiter, ns.ts_unit
    job.max_dead_letter_fraction, job.plan_only = float(frac), bool(ns.plan_only)
    TextOptions(job.delimiter, None, job.ts_unit).check(job.dim)
