"""Smoke test of the benchmark package (benchmarks/dpbench) and unit tests of its target evaluation.

Benchmarks measure, tests assert: nothing here checks a timing or a cost target; it checks that the
quick configuration's smallest piece produces a report, that diffprivlib is skipped cleanly where it is
not installed (this venv has scikit-learn ≥ 1.9), and that targets.py and first_targets.py compute PASS/MISS
and the gap from the methods and ε they name."""
from __future__ import annotations

import json
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

from dpbench import first_targets, targets  # noqa: E402
from dpbench.harness import plan  # noqa: E402
from dpbench.summary import build_meta, summarise  # noqa: E402


def test_the_quick_configurations_smallest_piece_writes_the_report(tmp_path):
    from dpbench.cli import main

    assert main(["--quick", "--datasets", "blobs_1e4", "--methods", "kmeans,minibatch,diffprivlib,dpstream,mean",
                 "--eps", "1", "--seeds", "1", "--kmedian-datasets", "none", "--cell-budget", "0",
                 "--run-timeout", "0", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "results.md").read_text(encoding="utf-8")
    res = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    for f in ("cost_vs_eps.png", "cost_vs_checkpoint.png", "state_vs_n.png"):
        assert (tmp_path / f).stat().st_size > 0
    assert "## Targets" in md and "| blobs_1e4 cost ratio |" in md and "## Intermediate releases" in md
    assert "| method | ε=1 | ε=∞ / non-DP |" in md  # KMeans' cell in its own column, not under ε = 1
    recs = {(r["method"], r["eps"], r["seed"]): r for r in res["records"]}
    assert recs[("dpstream", "1", 0)]["status"] == "ok" and recs[("kmeans", "-", 0)]["status"] == "ok"
    assert res["summary"]["blobs_1e4|kmeans|-"]["final_ratio"]["median"] == 1.0
    ticks = build_meta(res["records"])["blobs_1e4"]["checkpoint_ticks"]
    assert len(recs[("dpstream", "1", 0)]["ckpt_costs"]) == len(ticks)
    dpl = recs[("diffprivlib", "1", 0)]
    try:
        import diffprivlib  # noqa: F401
        assert dpl["status"] == "ok"
    except Exception:
        assert dpl["status"] == "skipped" and "diffprivlib" in dpl["reason"]
        assert "skipped" in md


def test_the_plan_runs_offline_peers_once_and_kmedian_only_where_asked():
    tasks = plan(["blobs_1e4_inorder", "digits"], ["kmeans", "diffprivlib", "dpstream", "dpstream_kmedian"],
                 [1.0, math.inf], lambda d: 2, ["blobs_1e4_inorder"])
    keys = {(t.dataset, t.method, t.eps, t.seed) for t in tasks}
    assert ("blobs_1e4", "kmeans", "-", 0) in keys  # the in-order set's reference is its shuffled set's
    assert ("blobs_1e4", "kmedian", "-", 0) in keys
    assert not any(d == "blobs_1e4_inorder" and m in ("kmeans", "diffprivlib") for d, m, _, _ in keys)
    assert ("blobs_1e4_inorder", "dpstream_kmedian", "inf", 1) in keys
    assert not any(d == "digits" and m == "dpstream_kmedian" for d, m, _, _ in keys)
    assert ("digits", "diffprivlib", "1", 1) in keys and ("digits", "diffprivlib", "inf", 0) not in keys
    assert len(keys) == len(tasks)


def _records():
    """A fake run: reference cost 100 for 'blobs_1e4' and its in-order variant, dpstream 103 / 107."""
    def prep(d, base):
        return dict(dataset=d, method="_prepare", eps="-", seed=0, status="ok",
                    meta=dict(n=1000, d=10, k=10, tick=100, T=10, base=base, held_out=False, mean_cost=3000.0,
                              checkpoint_ticks=[1, 10], checkpoint_n=[100, 1000]))

    def run(d, m, e, s, c, ck=None):
        return dict(dataset=d, method=m, eps=e, seed=s, status="ok", final_cost=c, final_cost_z1=c / 10,
                    fit_time=0.01, cpu_time=0.01, state_final=10, state_max=20, ckpt_costs=ck)
    return [prep("blobs_1e4", "blobs_1e4"), prep("blobs_1e4_inorder", "blobs_1e4"),
            run("blobs_1e4", "kmeans", "-", 0, 100.0), run("blobs_1e4", "diffprivlib", "1", 0, 300.0),
            dict(dataset="blobs_1e4", method="_prefix_ref", eps="-", seed=0, status="ok", prefix_ref=[10.0, None]),
            run("blobs_1e4", "dpstream", "1", 0, 103.0, [12.0, 103.0]),
            run("blobs_1e4_inorder", "dpstream", "1", 0, 107.0)]


def test_summaries_take_ratios_against_the_shuffled_sets_reference():
    recs = _records()
    meta = build_meta(recs)
    s = summarise(recs, meta)
    assert meta["blobs_1e4_inorder"]["ref_cost"] == 100.0
    assert s["blobs_1e4|dpstream|1"]["final_ratio"]["median"] == pytest.approx(1.03)
    assert s["blobs_1e4|dpstream|1"]["checkpoints"]["1"]["ratio"]["median"] == pytest.approx(1.2)
    assert s["blobs_1e4|dpstream|1"]["checkpoints"]["10"]["ratio"]["median"] == pytest.approx(1.03)
    assert s["blobs_1e4_inorder|dpstream|1"]["final_ratio"]["median"] == pytest.approx(1.07)
    assert s["blobs_1e4_inorder|diffprivlib|1"]["from_base"]  # offline: the shuffled set's run
    rows = {r["data"]: r for r in targets.inorder(s, meta)}
    assert rows["blobs_1e4_inorder"]["result"] == "PASS"  # 1.07 / 1.03 = 1.039 ≤ 1.05
    assert rows["blobs_1e4_inorder"]["value"] == pytest.approx(1.07 / 1.03)


def cell(v, n=5, **kw):
    a = dict(median=v, min=v, max=v, n=n)
    c = dict(final_ratio=a, pts_per_s=a, pts_per_s_cpu=a)
    c.update(kw)
    return c


def agg(v, n=5):
    return dict(median=v, min=v, max=v, n=n)


def by(rows, data, word=""):
    return [r for r in rows if r["data"] == data and word in r["target"]][0]


def test_ratio_targets_pass_at_the_threshold_and_miss_above_it_with_the_gap():
    s = {"blobs_1e5|dpstream|1": cell(1.03), "blobs_1e6|dpstream|1": cell(1.014, n=3),
         "digits|dpstream|1": cell(1.2)}
    rows = targets.evaluate(s, {})
    assert by(rows, "blobs_1e5", "cost ratio")["result"] == "PASS"
    r6 = by(rows, "blobs_1e6", "cost ratio")
    assert r6["result"] == "MISS" and r6["gap"] == "+0.004 (+0.4%)" and "(3 seeds; target: 5)" in r6["measured"]
    assert by(rows, "digits")["gap"].startswith("-0.250")
    assert by(rows, "china")["result"] == "NOT RUN" and by(rows, "gmm100")["result"] == "NOT RUN"


def test_diffprivlib_comparisons_are_strict_for_embeddings_and_not_for_skewed():
    s = {"emb256|dpstream|1": cell(2.0), "emb256|diffprivlib|1": cell(2.5),  # 0.8 exactly: not below
         "emb784|dpstream|1": cell(1.1), "emb784|diffprivlib|1": cell(2.0),
         "skewed|dpstream|1": cell(4.0), "skewed|diffprivlib|1": cell(4.0)}
    rows = targets.evaluate(s, {})
    assert by(rows, "emb256", "diffprivlib")["result"] == "MISS"
    assert by(rows, "emb784", "diffprivlib")["result"] == "PASS"
    assert by(rows, "emb784", "diffprivlib")["value"] == pytest.approx(0.55)
    assert by(rows, "skewed")["result"] == "PASS"
    s["skewed|dpstream|1"] = cell(4.1)
    assert by(targets.evaluate(s, {}), "skewed")["result"] == "MISS"
    del s["emb784|diffprivlib|1"]
    assert by(targets.evaluate(s, {}), "emb784", "diffprivlib")["result"] == "NOT RUN"


def test_in_order_variants_are_judged_against_their_shuffled_cost():
    meta = {"china": dict(base="china"), "china_inorder": dict(base="china"),
            "digits_inorder": dict(base="digits"), "gmm100_inorder": dict(base="gmm100", held_out=True)}
    s = {"china|dpstream|1": cell(1.05), "china_inorder|dpstream|1": cell(1.1025),
         "digits_inorder|dpstream|1": cell(1.5), "gmm100|dpstream|1": cell(2.0),
         "gmm100_inorder|dpstream|1": cell(2.2)}
    rows = {r["data"]: r for r in targets.inorder(s, meta)}
    assert rows["china_inorder"]["result"] == "PASS" and rows["china_inorder"]["value"] == pytest.approx(1.05)
    assert rows["digits_inorder"]["result"] == "NOT RUN"
    assert rows["gmm100_inorder"]["result"] == "MISS" and "held out" in rows["gmm100_inorder"]["target"]


def test_prefix_target_takes_the_worst_checkpoint_from_ten_percent_on():
    ck = {"3": dict(frac=0.03, ratio=agg(9.0)), "10": dict(frac=0.1, ratio=agg(1.4)),
          "50": dict(frac=0.5, ratio=dict(median=1.45, min=1.0, max=2.5, n=5)), "100": dict(frac=1.0, ratio=agg(1.01))}
    s = {"blobs_1e5|dpstream|1": cell(1.01, checkpoints=ck),
         "blobs_1e5|dpstream|0.5": cell(1.1, checkpoints=dict(ck, **{"20": dict(frac=0.2, ratio=agg(1.6))}))}
    r1, r05 = (by(targets.evaluate(s, {}), "blobs_1e5", f"ε = {e}") for e in ("1", "0.5"))
    assert r1["result"] == "PASS" and r1["value"] == 1.45 and "worst seed 2.500" in r1["measured"]
    assert r05["result"] == "MISS" and r05["value"] == 1.6 and r05["gap"] == "+0.100"


def test_throughput_and_state_targets_use_cpu_rates_and_the_share_of_n_times_d():
    meta = {"emb784": dict(n=100_000, d=784), "pixels": dict(n=100_000, d=784)}
    s = {"emb784|dpstream|1": cell(1.1, pts_per_s_cpu=agg(60_000.0), state_final=agg(2.0e6), state_max=agg(3.0e6)),
         "blobs_1e6|dpstream|1": cell(1.0, pts_per_s_cpu=agg(140_000.0))}
    rows = targets.evaluate(s, meta)
    assert by(rows, "emb784", "throughput")["result"] == "PASS"
    t10 = by(rows, "blobs_1e6", "throughput")
    assert t10["result"] == "MISS" and t10["gap"] == "-6.7%"
    st = by(rows, "emb784", "state")
    assert st["result"] == "PASS" and st["value"] == pytest.approx(100 * 2.0e6 / 78.4e6)
    s = {"pixels|dpstream|1": cell(1.1, pts_per_s_cpu=agg(40_000.0), state_final=agg(3.0e6))}  # no emb784: pixels
    rows = targets.evaluate(s, meta)
    assert by(rows, "pixels", "throughput")["result"] == "MISS" and by(rows, "pixels", "state")["result"] == "MISS"


def test_an_empty_summary_is_all_not_run_and_held_out_checks_only_cover_held_out_sets():
    rows = targets.evaluate({}, {})
    assert rows and all(r["result"] == "NOT RUN" for r in rows)
    assert targets.tally(rows) == f"0 PASS, 0 MISS, {len(rows)} not run"
    meta = {"aniso32": dict(base="aniso32", held_out=True), "blobs_1e4": dict(base="blobs_1e4"),
            "aniso32_inorder": dict(base="aniso32", held_out=True)}
    s = {"aniso32|dpstream|1": cell(1.2), "aniso32|diffprivlib|1": cell(2.0)}
    ho = targets.held_out(s, meta)
    assert [r["result"] for r in ho] == ["PASS", "PASS"] and {r["data"] for r in ho} == {"aniso32"}


def test_first_releases_diagnose_lists_every_epoch_of_the_release(tmp_path, capsys):
    # the benchmark's --diagnose view of a short stream: one block per epoch the run opened, the closed
    # ones with released mass, the fit factors of the release's age rule (1 for the newest non-empty set)
    import first_releases

    first_releases.main(["blobs_1e4", "--eps", "1", "--seeds", "1", "--no-prefix", "--diagnose", "10",
                         "--cache", str(tmp_path)])
    out = capsys.readouterr().out
    head = [ln for ln in out.splitlines() if ln.startswith("  tick 10: release ")]
    assert len(head) == 1
    n_epochs = int(head[0].split(", epoch ")[1].split(",")[0]) + 1
    rows = [ln for ln in out.splitlines() if ln.startswith("    epoch ")]
    assert [int(r.split()[1]) for r in rows] == list(range(n_epochs)) and n_epochs >= 2
    closed = [r for r in rows if "(closed)" in r]
    assert len(closed) == n_epochs - 1 and all(float(r.split("mass ")[1].split(",")[0]) > 0 for r in closed)
    factors = [float(r.split("fit factor ")[1].split(",")[0]) for r in rows]
    assert max(factors) == 1.0 and all(0 <= f <= 1 for f in factors)


def test_first_releases_stop_with_a_declared_end_puts_every_point_of_the_prefix_through_a(tmp_path, capsys):
    # --stop TICK --declare-end: the prefix as a whole stream whose end the user declares; its last
    # release reflects every point that arrived (nothing waits in a block), which a run that goes on does not
    import first_releases

    args = ["blobs_1e4", "--eps", "1", "--seeds", "1", "--no-prefix", "--diagnose", "3", "--stop", "3",
            "--cache", str(tmp_path)]
    first_releases.main(args + ["--declare-end"])
    ended = capsys.readouterr().out
    first_releases.main(args)
    going_on = capsys.readouterr().out

    def head(out):
        rows = [ln for ln in out.splitlines() if ln.startswith("  tick 3: release ")]
        assert len(rows) == 1 and "stopped at tick 3" in out.splitlines()[-1]
        return rows[0]

    assert "waiting in open blocks 0 points" in head(ended) and "through A 3000 of 3000 points" in head(ended)
    waiting = int(head(going_on).split("waiting in open blocks ")[1].split()[0])
    assert waiting > 0 and f"through A {3000 - waiting} of 3000 points" in head(going_on)
    assert "θ_keep" in head(ended)


def test_first_releases_lists_the_flush_ticks_beyond_the_epoch_changes(tmp_path, capsys):
    # the "other flushes" column: none under the default schedule (the first flush and the epoch changes only), and
    # under flush_schedule="count" the ticks it adds, none of them an epoch change
    import first_releases

    args = ["blobs_1e4", "--eps", "1", "--seeds", "1", "--no-prefix", "--cache", str(tmp_path)]

    def seed_line(extra):
        first_releases.main(args + extra)
        rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("seed 0: ")]
        assert len(rows) == 1
        changes = json.loads(rows[0].split("epoch changes ")[1].split("  other")[0])
        return changes, json.loads(rows[0].split("other flushes ")[1])

    changes, other = seed_line([])
    assert other == [] and changes
    changes, other = seed_line(['flush_schedule="count"'])
    assert other and not set(other) & set(changes) and 1 not in other


def test_first_release_targets_read_the_default_horizon_methods_at_their_own_eps():
    ck = {"10": dict(frac=0.1, ratio=agg(1.9)), "100": dict(frac=1.0, ratio=agg(1.05))}
    s = {"digits|dpstream_declared_end|1": cell(1.45), "blobs_1e4|dpstream_declared_end|1": cell(1.31),
         "emb784_1e4|dpstream|1": cell(1.0),  # the exact horizon is not what a user without T gets
         "china|dpstream_default_horizon|4": cell(1.021), "china|dpstream_default_horizon|1": cell(1.0),
         "emb784|dpstream_default_horizon|0.5": cell(1.1, checkpoints=ck),
         "emb784|dpstream_default_horizon|1": cell(1.09, checkpoints=ck),
         "blobs_1e5|dpstream|1": cell(1.0, checkpoints=ck)}
    rows = first_targets.evaluate(s, {})
    assert by(rows, "digits")["result"] == "PASS" and by(rows, "blobs_1e4")["result"] == "MISS"
    assert by(rows, "emb784_1e4")["result"] == "NOT RUN" and by(rows, "pixels_1e4")["result"] == "NOT RUN"
    ch = by(rows, "china", "final release, ε = 4")
    assert ch["result"] == "MISS" and ch["value"] == 1.021
    e05, e1 = (by(rows, "emb784", f"prefix optimum, ε = {e}") for e in ("0.5", "1"))
    assert e05["result"] == "PASS" and e05["value"] == 1.9 and e1["result"] == "MISS"
    assert by(rows, "emb784", "final release")["result"] == "PASS"  # the final release, 1.09 ≤ 1.10
    assert all(r["result"] == "NOT RUN" for r in rows if r["data"] == "blobs_1e5" and "prefix" in r["target"])


def test_first_release_in_order_rows_pair_each_method_with_itself_and_no_regression_reads_the_exact_horizon():
    meta = {"blobs_1e4": dict(base="blobs_1e4"), "blobs_1e4_inorder": dict(base="blobs_1e4"),
            "pixels": dict(base="pixels", held_out=True)}
    s = {"blobs_1e4|dpstream_declared_end|1": cell(1.2), "blobs_1e4_inorder|dpstream_declared_end|1": cell(1.26),
         "blobs_1e4|dpstream_default_horizon|1": cell(1.5), "blobs_1e4_inorder|dpstream_default_horizon|1": cell(5.0),
         "blobs_1e4|dpstream|1": cell(1.0), "blobs_1e4_inorder|dpstream|1": cell(1.0),
         "gmm100|dpstream|1": cell(3.7), "gmm100|dpstream_default_horizon|1": cell(1.0),
         "pixels|dpstream|1": cell(1.21)}
    rows = first_targets.evaluate(s, meta)
    io = [r for r in rows if r["data"] == "blobs_1e4_inorder"]
    assert [(r["result"], round(r["value"], 3)) for r in io] == [("PASS", 1.05), ("MISS", 3.333)]
    assert "declared end" in io[0]["target"] and "no declared end" in io[1]["target"]
    assert by(rows, "gmm100", "no regression")["result"] == "PASS"  # 3.7 at the threshold, read from dpstream
    px = by(rows, "pixels", "no regression")
    assert px["result"] == "MISS" and "held out" in px["target"] and px["gap"].startswith("+0.003")
    assert by(rows, "blobs_1e6", "no regression")["result"] == "NOT RUN"


def test_the_plan_runs_the_default_horizon_methods_only_at_the_first_release_eps():
    tasks = plan(["digits"], ["dpstream", "dpstream_declared_end", "dpstream_default_horizon"],
                 [0.5, 1.0, 2.0, math.inf], lambda d: 1, first_release_eps={"0.5", "1"})
    cells = {(t.method, t.eps) for t in tasks if t.method.startswith("dpstream")}
    assert {("dpstream", e) for e in ("0.5", "1", "2", "inf")} <= cells
    assert {e for m, e in cells if m != "dpstream"} == {"0.5", "1"}
    assert ("dpstream_declared_end", "0.5") in cells and ("dpstream_default_horizon", "1") in cells


@pytest.mark.parametrize("gen", ["loc2", "mix20", "dir50", "grow", "blobs5x8"])
def test_held_out_generators_stay_in_their_public_ball_and_each_order_streams_every_row_once(gen):
    # the radius is the generator's public rule, so a point outside it would make the script measure clipping;
    # each order is a permutation with the shape its name promises
    import held_out_orders as h

    X, y, k, radius = h.draw(gen, scale=0.1)
    assert np.linalg.norm(X, axis=1).max() <= radius and len(np.unique(y)) == k
    for how in ("shuffled", "label", "sweep", "natural", "bursty"):
        p = h.order(X, y, how)
        assert np.array_equal(np.sort(p), np.arange(X.shape[0])), how
    assert np.all(np.diff(y[h.order(X, y, "label")]) >= 0)
    assert np.all(np.diff(X[h.order(X, y, "sweep"), 0]) >= 0)
    runs = np.flatnonzero(np.diff(y[h.order(X, y, "bursty")])) + 1  # where one cluster's burst gives way
    lengths = np.diff(np.concatenate([[0], runs, [X.shape[0]]]))
    assert lengths.max() <= 500 and len(lengths) >= k


def test_held_out_orders_runs_both_settings_and_the_exact_horizon_holds_every_point():
    import held_out_orders as h

    X, y, k, radius = h.draw("loc2", scale=0.06)  # 3 ticks
    X = X[h.order(X, y, "label")]
    res = h.run_cell(X, k, radius, [("off", {"part_fire": 0}), ("on", {})], seeds=1)
    assert set(res) == {(s, m) for s in ("off", "on") for m in ("none", "end", "exact")}
    for final, worst in res.values():
        assert 0.9 < final < 50 and 0.9 < worst < 50  # ratios to KMeans' own cost, every cell filled
    # a declared end and the exact horizon put every point through A: far better than the pending-block release
    assert res[("on", "end")][0] < res[("on", "none")][0]
