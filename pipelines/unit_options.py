"""The job's privacy-unit options (user-level privacy; docs/user-level-privacy.md)."""
from __future__ import annotations

from typing import Optional

CONTRIBUTIONS = ("records", "tick_mean")


def add_options(ap) -> None:
    g = ap.add_argument_group("privacy unit (user-level privacy)")
    g.add_argument("--privacy_id_field",
                   help="protect one person (device, account) instead of one record: where each record holds its "
                        "privacy id: a key of the JSON record (a string or an integer), a CSV column named in "
                        "the header (implies --csv_header for .csv input), or a Pub/Sub message attribute (which "
                        "wins over the JSON key); records without one are dead-lettered (no_privacy_id). Needs "
                        "--max_contributions")
    g.add_argument("--max_contributions", type=int,
                   help="public bound L: records (or tick means) one privacy id keeps per run; the rest are dropped")
    g.add_argument("--max_contributions_per_tick", type=int,
                   help="public bound ℓ ≤ L on the records one privacy id keeps per tick (default L)")
    g.add_argument("--contribution", choices=CONTRIBUTIONS, default="records",
                   help="records: the id's first records; tick_mean: one point per tick, the mean of its records "
                        "(default records)")


def prepare(ns) -> None:
    """Before the job's own checks: a CSV column is named in the header, so .csv input has one."""
    if getattr(ns, "privacy_id_field", None) and getattr(ns, "input", None) \
            and str(ns.input).lower().endswith(".csv"):
        ns.csv_header = True  # the header line keeps no slot


def unit_of(ns, clock: str, fmt: Optional[str], source: str, error) -> Optional[dict]:
    """The unit settings of a job (None: one record is the unit), or ``error(message)`` raised."""
    if ns.privacy_id_field is None:
        if ns.max_contributions is not None or ns.max_contributions_per_tick is not None \
                or ns.contribution != "records":
            raise error("--max_contributions, --max_contributions_per_tick and --contribution need "
                        "--privacy_id_field (the record's privacy id)")
        return None
    if ns.max_contributions is None:
        raise error("--privacy_id_field needs --max_contributions (L, the records one id keeps per run)")
    if source == "builtin":
        raise error("--privacy_id_field: the built-in stream's records carry no privacy id")
    if fmt == "numpy":
        raise error("--privacy_id_field reads the id from JSON records or CSV columns; numpy rows carry no id")
    return {"privacy_unit": ns.privacy_id_field, "max_contributions": ns.max_contributions,
            "max_contributions_per_tick": ns.max_contributions_per_tick, "contribution": ns.contribution}


def check_files(unit: Optional[dict], files, error) -> None:
    """Every input file of a job with a privacy unit must hold text records (the id is a JSON key or a CSV
    column); numpy and Parquet rows carry no id."""
    if unit is None or not files:
        return
    other = sorted({"parquet" if f.path.lower().endswith(".parquet") else f.fmt for f in files}
                   - {"json", "csv", "auto"})
    if other:
        raise error(f"--privacy_id_field reads the id from JSON records or CSV columns; the input has "
                    f"{', '.join(other)} files (their rows carry no id)")


def engine_kwargs(unit: Optional[dict]) -> dict:
    return {} if unit is None else dict(unit)
