"""The plan in words: what a ledger says about its relation, its runs and its unit of privacy, and the
Markdown table every release carries (:func:`plan_table`, from :meth:`dpstream.privacy.PrivacyPlan.to_dict`).

Text only: nothing here computes a noise scale or a budget, so a release's dict can be rendered without the
accountant (``pipelines/report.py`` reads releases this way).
"""
from __future__ import annotations

from typing import Optional


def relations_note(neighbouring: str, unit_field: Optional[str] = None) -> str:
    """The two relations a plan names, and why they differ, in words a compliance reader can follow.

    ``unit_field``: the privacy unit's name (None: one record is the unit, the wording of every
    record-level release, unchanged)."""
    if unit_field is not None:
        return _unit_relations_note(neighbouring, unit_field)
    if neighbouring == "replace_one":
        data = ("The data's relation is replace_one: two inputs are neighbours when they differ in the content "
                "of one record at one position. Under the position clock (ticks of a fixed number of records) "
                "the number of records and their positions are public, so a record can be changed but not "
                "removed; the guarantee hides what any one record holds.")
        sens = ("Every sensitivity in this plan is computed for replace_one (changing a record moves a pure "
                "part's noisy counts by 2 instead of 1, a Gaussian histogram's squared l2 by 2, a Gaussian sum's "
                "squared l2 by 4), and the noise is calibrated to those sensitivities.")
    else:
        data = ("The data's relation is add_remove: two inputs are neighbours when one holds one record more. "
                "Under event-time ticks the number of records is itself private; the guarantee hides whether "
                "any one record is present at all.")
        sens = "Every sensitivity in this plan is computed for add_remove."
    return (f"{data} {sens} The accountant (dp-accounting) composes the mechanisms and is always asked under "
            f"ADD_OR_REMOVE_ONE with these sensitivities given to it: each mechanism's privacy loss between two "
            f"inputs that differ by the data's relation is that of the same mechanism with that sensitivity, "
            f"which is what the accountant computes, so the two names differ only because the sensitivities "
            f"are ours and not the accountant's (its own REPLACE_ONE would scale them a second time).")


def _unit_relations_note(neighbouring: str, u: str) -> str:
    if neighbouring == "replace_one":
        data = (f"The data's relation is replace_one for one {u}: two inputs are neighbours when all records of one "
                f"{u} are replaced, in their public slots, by records of one other {u} that is not otherwise in the "
                f"input, or by ⊥ (an empty slot). Under the position clock (ticks of a fixed number of records) the "
                f"number of records and their positions are public; the guarantee hides what any one {u}'s records "
                f"hold. Because the bounds keep a {u}'s first records, the replacing {u}'s kept points may lie in "
                f"other ticks and parts than the replaced one's.")
        sens = (f"Every sensitivity in this plan is computed for that relation and one {u} bounded as stated: its "
                f"kept points are removed and at most as many added, possibly elsewhere, so each mechanism's "
                f"one-record replace_one sensitivity is multiplied by the bound (the stream counter's, whose "
                f"one-record replacement keeps its tick, by the bound and the two-partition factor).")
    else:
        data = (f"The data's relation is add_remove for one {u}: two inputs are neighbours when one holds all records "
                f"of one {u} more. Under event-time ticks the number of records is itself private; the guarantee "
                f"hides whether any one {u} is present at all.")
        sens = (f"Every sensitivity in this plan is computed for add_remove of one {u} bounded as stated (each "
                f"one-record sensitivity multiplied by the bound).")
    return (f"{data} {sens} The accountant (dp-accounting) is always asked under ADD_OR_REMOVE_ONE with these "
            f"sensitivities given to it, so the two names differ only because the sensitivities are ours. The "
            f"total is the basic sum (the merged Gaussian's ε at δ plus the pure parts), not the tighter PLD "
            f"composition: a {u}'s points reach Gaussian and pure parts adaptively, a mix the PLD does not cover.")


RUNS_NOTE = ("every run of T ticks has fresh mechanisms, noise keys and the whole budget; a record's tick is a "
             "function of the record and the public clock, so it lies in exactly one run, and a run depends on "
             "earlier ones only through their releases: the whole sequence over all runs is (ε, δ)-DP per record "
             "(parallel composition); a person with one record in each of m runs gets (m·ε, m·δ) (the runs "
             "compose), and m records in one run give (m·ε, m·e^((m−1)ε)·δ) (group privacy)")


UNIT_RUNS_NOTE = ("every run of T ticks has fresh mechanisms, noise keys, the whole budget and fresh contribution "
                  "bounds; a unit's records may lie in many runs, so parallel composition over runs holds for "
                  "records but not for units: a unit with records in m runs is protected by the m-fold "
                  "composition of one run's guarantee: (m·ε, m·δ) by basic composition over m runs (m·ε for pure "
                  "ε)")


def unit_statement(field_name: str, contribution: str, L: int, per_tick: int) -> str:
    """The unit of privacy in one line, as plans, ledgers and releases say it."""
    if contribution == "tick_mean":
        return (f"unit of privacy: one {field_name}, one mean point per tick, at most {L} ticks per run "
                f"(all of its records in a tick are averaged; later ticks are dropped)")
    tick = f", at most {per_tick} per tick" if per_tick < L else ""
    return f"unit of privacy: one {field_name}, at most {L} records per run{tick} (the rest are dropped)"


def plan_table(d: dict) -> str:
    """The ledger as a Markdown table, from :meth:`PrivacyPlan.to_dict` (what every release carries).

    Each line's ε is what that line would cost *if it ran alone* (a Gaussian line at its own share of
    δ); these do not add up to the total. The total is the smaller of one privacy-loss-distribution
    composition of every line at δ and the basic sum (the Gaussian lines merged exactly into one
    Gaussian, whose ε at δ is added to the pure parts). The "share" column is each Gaussian line's
    part of that merged Gaussian's 1/z² = Σ instances·(sensitivity/σ)²: those shares do add up."""
    rel = d["neighbouring"]
    unit = d.get("unit")
    who = "one record" if unit is None else f"one {unit['field']}"
    head = (f"Privacy plan: ({d['epsilon']:g}, {d['delta']:g})-DP for {who} under {rel} neighbours "
            f"(the sensitivities below are for this relation); seed: {d.get('seed', '-')}\n"
            + (f"Relations: {d['relations']}\n" if d.get("relations") else "")
            + (f"Total spent: ε = {d['total_epsilon']:.4f} at δ = {d['delta']:g}, the smaller of the PLD composition "
               f"of all lines ({d['pld_epsilon']:.4f}) and the basic sum ({d['basic_epsilon']:.4f})\n" if unit is None
               else f"Total spent: ε = {d['total_epsilon']:.4f} at δ = {d['delta']:g}, the basic sum of the lines "
                    f"(for one {unit['field']} the PLD composition is not claimed)\n"))
    if d.get("runs", 1) != 1:
        runs = "an unbounded number of" if d.get("runs") is None else f"up to {d['runs']}"
        if unit is None:
            head += (f"Runs: {runs} runs of T = {d.get('horizon_ticks')} ticks; this ledger is one run's, and the "
                     f"guarantee holds for the whole sequence: {d.get('across_runs', RUNS_NOTE)}\n")
        else:
            head += (f"Runs: {runs} runs of T = {d.get('horizon_ticks')} ticks; this ledger is one run's: "
                     f"{d.get('across_runs', UNIT_RUNS_NOTE)}\n")
    if unit is not None:
        two = (", the stream counter's also × 2 in ℓ1 (√2 in ℓ2): a replaced unit's points may move to other ticks"
               if rel == "replace_one" else "")
        head += (f"{unit['statement'][0].upper()}{unit['statement'][1:]}; the sensitivities and instance counts "
                 f"below are for that unit (every one-record sensitivity × {unit['max_contributions']}{two})\n")
        if d.get("runs", 1) == 1:
            head += f"Runs: {d.get('across_runs', UNIT_RUNS_NOTE)}\n"
    head += "\n"
    gauss = [ln for ln in d["lines"] if ln["mechanism"] == "gaussian" and ln["noise"] > 0]
    inv = {id(ln): ln["count"] * (ln["sensitivity"] / ln["noise"]) ** 2 for ln in gauss}
    total_inv = sum(inv.values())
    per = "record" if unit is None else "unit"
    rows = [f"| component | mechanism | noise (σ or scale b) | sensitivity per {per} ({rel}) | instances per "
            f"{'record' if unit is None else 'point'} | share of the merged Gaussian (1/z²) | ε if this line ran alone |",
            "|---|---|---|---|---|---|---|"]
    for ln in d["lines"]:
        if id(ln) in inv and total_inv > 0:
            share = f"{100.0 * inv[id(ln)] / total_inv:.1f}%"
        elif ln["mechanism"] in ("svt", "discrete_laplace"):
            share = "— (pure ε)"
        else:
            share = "—"
        rows.append(f"| {ln['component']} | {ln['mechanism']} | {ln['noise']:.4g} | {ln['sensitivity']:.4g} | "
                    f"{ln['count']} | {share} | {ln['epsilon']:.4g} |")
    if d.get("mode") == "gaussian+pld" and total_inv > 0:
        pure = sum(ln["epsilon"] for ln in d["lines"] if ln["mechanism"] != "gaussian")
        why = ("\n\nWhy the last column does not add up to the total: it is each line's ε if it were the only "
               "mechanism, each Gaussian line at its own share of δ. ")
        z = f"{total_inv ** -0.5:.4g}"
        if unit is not None:  # a unit's adaptive placement: the basic sum is the total
            foot = (why + f"The {len(gauss)} Gaussian lines act as one Gaussian of noise multiplier z = {z} even "
                    f"when a {unit['field']}'s points reach them adaptively (fully adaptive composition of "
                    f"Gaussians, Smith and Thakurta 2022); its ε at δ = {d['delta']:g} plus the pure part "
                    f"(ε = {pure:.4g}) is the total {d['basic_epsilon']:.4f}. The PLD of the mix "
                    f"({d['pld_epsilon']:.4f}) is shown for reference only.")
        else:
            foot = (why + f"Gaussian noise composes exactly: the {len(gauss)} Gaussian lines act as one Gaussian "
                    f"of noise multiplier z = {z} (the share column adds up to 100%); its ε at δ = "
                    f"{d['delta']:g} plus the pure part (ε = {pure:.4g}) is the basic sum "
                    f"{d['basic_epsilon']:.4f}, and the PLD composes everything at δ more tightly "
                    f"({d['pld_epsilon']:.4f}).")
    elif d.get("mode") == "pure":
        foot = (f"\n\nPure ε (δ = 0): the lines compose by the basic sum, so the last column adds up to the "
                f"total ε = {d['total_epsilon']:.4f}.")
    else:
        foot = ""
    return head + "\n".join(rows) + foot + _gated_note(d)


def _gated_note(d: dict) -> str:
    """With ``cells_gate`` (P22): the plain tree's lines on a gated block, and A's load in either mode."""
    gated = d.get("gated_lines")
    if not gated:
        return ""
    a = [ln for ln in d["lines"] if ln["component"].startswith("semicoreset A")]
    if d.get("mode") == "pure":
        load = lambda lines: f"Σ ε = {sum(ln['epsilon'] for ln in lines):.6g}"  # noqa: E731
    else:
        load = lambda lines: "Σ (Δ/σ)² = {:.6g}".format(  # noqa: E731
            sum(ln["count"] * (ln["sensitivity"] / ln["noise"]) ** 2 for ln in lines))
    rows = [f"| {ln['component']} | {ln['mechanism']} | {ln['noise']:.4g} | {ln['sensitivity']:.4g} | {ln['count']} |"
            for ln in gated]
    return ("\n\nOn a block `cells_gate` keeps from the cells, A runs the plain tree with these lines instead of "
            "its lines above (a record's one A call runs one mode, so they are not composed a second time); "
            f"A's lines above: {load(a)}, these: {load(gated)}.\n\n"
            "| component | mechanism | noise (σ or scale b) | sensitivity | instances |\n|---|---|---|---|---|\n"
            + "\n".join(rows))
