"""From raw records to cells: (data set, method, ε) → median [min–max] over seeds of the cost ratio and the
other metrics. Ratios are taken here: k-means cost / the shuffled set's ``KMeans(n_init=10, random_state=0)``
cost (an in-order variant has the same points, so the same reference); k-median: Σ distances / the k-median
reference's; checkpoints: prefix cost / ``KMeans(n_init=3)`` on that prefix. An in-order variant's offline
peers (order-invariant) are the shuffled set's cells, marked ``from_base``."""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from . import datasets
from .peers import REGISTRY as PEERS
from .tasks import PREFIX_REF, PREPARE


def agg(vals) -> Optional[dict]:
    v = np.asarray([x for x in vals if x is not None], dtype=float)
    if v.size == 0:
        return None
    return dict(median=float(np.median(v)), min=float(v.min()), max=float(v.max()), n=int(v.size))


def _find(records, dataset, method, eps="-", seed=0, config=""):
    for r in records:
        if (r["dataset"], r["method"], r["eps"], r["seed"], r.get("config", "")) == (dataset, method, eps, seed,
                                                                                       config):
            return r
    return None


def build_meta(records: List[dict]) -> Dict[str, dict]:
    """Per data set: its ``_prepare`` meta, the references (k-means, k-median, prefixes) and the seeds run."""
    meta = {}
    for r in records:
        if r["method"] == PREPARE and r["status"] == "ok":
            meta[r["dataset"]] = dict(r["meta"])
    for d, m in meta.items():
        base = m.get("base", datasets.split_name(d)[0])
        ref = _find(records, base, "kmeans")
        m["ref_cost"] = ref["final_cost"] if ref and ref["status"] == "ok" else None
        kref = _find(records, base, "kmedian")
        m["ref_cost_z1"] = kref["final_cost_z1"] if kref and kref["status"] == "ok" else None
        pref = _find(records, d, PREFIX_REF)
        if pref and pref["status"] == "ok":
            m["prefix_ref"] = [m["ref_cost"] if v is None else v for v in pref["prefix_ref"]]
        m["seeds"] = max([r["seed"] + 1 for r in records if r["dataset"] == d and r["method"] in PEERS], default=0)
    return meta


def _ratio(num, den):
    return None if (num is None or not den) else num / den


def summarise(records: List[dict], meta: Dict[str, dict]) -> Dict[str, dict]:
    """Key ``dataset|method|eps`` (``|config`` appended for sweep records)."""
    groups: Dict[tuple, List[dict]] = {}
    for r in records:
        if r["method"] in PEERS:
            groups.setdefault((r["dataset"], r["method"], r["eps"], r.get("config", "")), []).append(r)
    out = {}
    for (d, meth, e, cfg), rs in groups.items():
        m = meta.get(d)
        if m is None:
            continue
        ok = [r for r in rs if r["status"] == "ok"]
        z1 = PEERS[meth].objective == "kmedian"
        ref, ref1 = m.get("ref_cost"), m.get("ref_cost_z1")
        n = m["n"]
        s = dict(final_ratio=agg(_ratio(r["final_cost_z1"] if z1 else r["final_cost"], ref1 if z1 else ref)
                                 for r in ok),
                 ratio_kmeans=agg(_ratio(r["final_cost"], ref) for r in ok),
                 ratio_kmedian=agg(_ratio(r["final_cost_z1"], ref1) for r in ok),
                 pts_per_s=agg(n / r["fit_time"] if r.get("fit_time") else None for r in ok),
                 pts_per_s_cpu=agg(n / r["cpu_time"] if r.get("cpu_time") else None for r in ok),
                 state_final=agg(r.get("state_final") for r in ok), state_max=agg(r.get("state_max") for r in ok),
                 n_ok=len(ok), seeds=sorted(r["seed"] for r in ok),
                 status={st: sum(1 for r in rs if r["status"] == st) for st in ("timeout", "capped", "skipped",
                                                                                  "error") if any(
                     r["status"] == st for r in rs)},
                 reasons=sorted({r["reason"] for r in rs if r.get("reason")}))
        pref = m.get("prefix_ref")
        if pref and ok and ok[0].get("ckpt_costs"):
            s["checkpoints"] = {str(t): dict(frac=nn / n, n_prefix=nn,
                                             ratio=agg(_ratio(r["ckpt_costs"][i], pref[i]) for r in ok
                                                       if r.get("ckpt_costs")))
                                for i, (t, nn) in enumerate(zip(m["checkpoint_ticks"], m["checkpoint_n"]))}
        key = f"{d}|{meth}|{e}" + (f"|{cfg}" if cfg else "")
        out[key] = s
    # in-order variants: offline peers are the shuffled set's cells
    for d, m in meta.items():
        base = m.get("base", d)
        if base == d:
            continue
        for key, s in list(out.items()):
            bd, meth, *rest = key.split("|")
            if bd == base and PEERS[meth].offline:
                out.setdefault("|".join([d, meth] + rest), dict(s, from_base=True))
    return out


def get(summary, ds, method, eps="-") -> Optional[dict]:
    """A cell with at least one finished run, else None."""
    s = summary.get(f"{ds}|{method}|{eps}")
    return s if (s and s.get("final_ratio")) else None


def get_raw(summary, ds, method, eps="-") -> Optional[dict]:
    return summary.get(f"{ds}|{method}|{eps}")


def med(cell, key="final_ratio") -> Optional[float]:
    return cell[key]["median"] if cell and cell.get(key) else None
