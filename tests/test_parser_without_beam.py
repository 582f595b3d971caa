"""The parser is Beam-free: the record types and ``parse_record`` import and run in a process where
``apache_beam`` cannot be imported (the report step and any tool read a file as the job does without
Beam), and the job's DoFn runs the very same function."""
from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_NO_BEAM = """
import json, sys
sys.modules["apache_beam"] = None  # any import of Beam now raises ImportError
import numpy as np
import transforms
from transforms.parser import parse_record
from transforms.records import REASONS, ParsedBatch, ParsedPoint, Record, count_items, records_from_lines
from transforms.text_formats import Lines, TextOptions
from pipelines.formats import text_options
class Job:  # the fields text_options reads
    delimiter, columns, csv_columns, ts_unit = ";", None, (1, 2), "s"
recs = records_from_lines([b"1,2", '{"x": [3, 4], "ts": 5}', "nan,1", b"\\xff"], start_slot=10, ts=7.0)
got = [parse_record(r, 2, "auto") for r in recs]
block, block_dead = parse_record(Record(Lines([b"1,1", b"2,2", b"x,3"]), 20, 8.0), 2, "csv", batch_arrays=True)
arr, _ = parse_record(Record(np.arange(6.0).reshape(3, 2), 30, 9.0), 2, "numpy", batch_arrays=True)
opt, _ = parse_record("u-1;48.5;2.5", 2, "csv", text_options=text_options(Job(), "csv"))
print(json.dumps({
    "points": [[(p.point.tolist(), p.slot, p.ts, p.publish_time) for p in pts] for pts, _ in got],
    "dead": [[(d["reason"], d["slot"]) for d in dead] for _, dead in got],
    "block": [(type(p).__name__, p.slots.tolist()) for p in block], "block_dead": [d["slot"] for d in block_dead],
    "arr": [(type(p).__name__, p.points.tolist(), p.slots.tolist()) for p in arr],
    "opt": opt[0].point.tolist(), "items": count_items(np.zeros((4, 2))), "reasons": len(REASONS),
    "beam": "apache_beam" in sys.modules and sys.modules["apache_beam"] is not None}))
"""


def test_the_parser_runs_without_beam():
    out = subprocess.run([sys.executable, "-c", _NO_BEAM], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # slots are the line indexes; a payload "ts" wins as event time, the carrier's stays the publish time
    assert got["points"] == [[[[1.0, 2.0], 10, 7.0, 7.0]], [[[3.0, 4.0], 11, 5.0, 7.0]], [], []]
    assert got["dead"] == [[], [], [["nan_or_inf", 12]], [["not_utf8", 13]]]
    assert got["block"] == [["ParsedBatch", [20, 21]]] and got["block_dead"] == [22]
    assert got["arr"] == [["ParsedBatch", [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]], [30, 31, 32]]]
    assert got["opt"] == [48.5, 2.5] and got["items"] == 4 and got["reasons"] == 15
    assert got["beam"] is False


def test_the_beam_dofn_uses_the_same_parser_and_types():
    import pytest
    pytest.importorskip("apache_beam", exc_type=ImportError)

    import transforms
    from transforms import parse, parser, records
    assert parse.parse_record is parser.parse_record is transforms.parse_record
    assert parse.Record is records.Record is transforms.Record
    assert parse.ParsedBatch is records.ParsedBatch and parse.REASONS is records.REASONS
    fn = parse.ParsePointsFn(2, "csv")
    out = list(fn.process(records.Record("1,2", 3)))
    assert len(out) == 1 and isinstance(out[0], records.ParsedPoint) and out[0].slot == 3
