"""The Dataflow Flex Template (templates/): metadata.json in step with build_parser(), a spec gcloud accepts,
an entry file that submits without waiting and fails with one line, pinned requirements, a consistent Dockerfile."""
from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines import dp_stream_cluster as job_mod

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"
METADATA = TEMPLATES / "metadata.json"

needs_beam = pytest.mark.skipif(importlib.util.find_spec("apache_beam") is None,
                                reason="apache_beam is not importable: the job's options cannot be split from Beam's")

# Options of build_parser() that are deliberately NOT template parameters, each with the reason.
EXCLUDED = {
    "report": "a store_true flag: a Flex Template passes every parameter as --name=value and argparse's "
              "store_true rejects --report=true; it is also local-only (the report needs a local --output "
              "directory, which a Dataflow job never has)",
    "plan_only": "a store_true flag (a Flex Template passes --name=value), and it submits nothing: run it locally "
                 "with the same options before launching the template",
    "version": "prints the version and exits: nothing to launch",
}
# Parameters with isOptional false, each with the reason (every option is optional at parse level).
REQUIRED = {
    "seed_registry": "parse_args refuses a non-local runner without --seed_registry: the launcher's disk is "
                     "thrown away, so the record of used seeds must be durable (gs://…)",
    "seed_file": "the template always runs on DataflowRunner, and parse_args refuses a non-local runner "
                 "without --seed_file (OS entropy is for local runners only)",
}
PARAM_TYPES = {"TEXT", "GCS_READ_FILE", "GCS_WRITE_FOLDER", "GCS_WRITE_FILE", "PUBSUB_TOPIC",
               "PUBSUB_SUBSCRIPTION", "BIGQUERY_TABLE"}
PARAM_KEYS = {"name", "label", "helpText", "isOptional", "regexes", "paramType"}
EXPECTED_TYPES = {"input_subscription": "PUBSUB_SUBSCRIPTION", "input_topic": "PUBSUB_TOPIC",
                  "output_topic": "PUBSUB_TOPIC", "input": "GCS_READ_FILE", "seed_file": "GCS_READ_FILE",
                  "output": "GCS_WRITE_FOLDER", "seed_registry": "GCS_WRITE_FILE"}  # TEXT otherwise
# A valid example value of each option without a default: must pass its regexes and the parser's type.
SAMPLES = {
    "input": "gs://bucket/points/*.jsonl",
    "input_subscription": "projects/p/subscriptions/points",
    "input_topic": "projects/p/topics/points",
    "output": "gs://bucket/run1",
    "part_fire": "2.5",
    "output_topic": "projects/p/topics/releases",
    "dead_letter": "projects/p/topics/dead-letters",
    "k": "5",
    "dim": "2",
    "radius": "15.5",
    "point_shards": "8",
    "center": "-0.5,1e-3",
    "columns": "lat,lon",
    "delimiter": ";",
    "seed_file": "gs://secrets/dpstream/seed",
    "seed_registry": "gs://registry/dpstream/seed_registry.jsonl",
    "tick_size": "1000",
    "tick_seconds": "10",
    "t_start": "2026-12-01T10:00:00Z",
    "csv_header": "true",
    "full_coresets": "true",
    "horizon_ticks": "8640",
    "privacy_id_field": "user_id",
    "max_contributions": "16",
    "max_contributions_per_tick": "4",
}


def _metadata() -> dict:
    with open(METADATA, encoding="utf-8") as fh:
        return json.load(fh)


def _params() -> dict:
    return {p["name"]: p for p in _metadata()["parameters"]}


def _options() -> list:
    """build_parser()'s options (not --help), in declaration order."""
    return [a for a in job_mod.build_parser()._actions if not isinstance(a, argparse._HelpAction)]


def _dests() -> list:
    return [a.dest for a in _options()]


# --------------------------------------------------------------------------- (a) one parameter per option

def test_parameters_are_the_parser_options_minus_the_documented_exclusions():
    names = [p["name"] for p in _metadata()["parameters"]]
    assert len(names) == len(set(names)), "duplicate parameter names"
    assert set(EXCLUDED) <= set(_dests()), "an exclusion names an option build_parser() no longer has"
    assert set(names) == set(_dests()) - set(EXCLUDED)
    assert names == [d for d in _dests() if d not in EXCLUDED], "keep metadata.json in build_parser() order"


def test_report_cannot_be_a_template_parameter(capsys):
    """Why `report` is excluded: the launcher would pass --report=true, which store_true rejects."""
    action = next(a for a in _options() if a.dest == "report")
    assert isinstance(action, argparse._StoreTrueAction)
    with pytest.raises(SystemExit) as e:
        job_mod.build_parser().parse_known_args(["--report=true"])
    assert e.value.code == 2
    assert "ignored explicit argument" in capsys.readouterr().err


@needs_beam
def test_report_is_local_only():
    with pytest.raises(job_mod.OptionError, match="--report needs a batch run with a local --output"):
        job_mod.parse_args(["--report", "--output=gs://bucket/run1", "--runner=DataflowRunner",
                            "--seed_file=gs://secrets/seed", "--seed_registry=gs://b/reg.jsonl"])


# --------------------------------------------------------------------------- (b) complete, valid parameters

@pytest.mark.parametrize("name", [d for d in _dests() if d not in EXCLUDED])
def test_parameter_is_complete(name):
    p = _params()[name]
    assert set(p) <= PARAM_KEYS, f"unexpected keys {set(p) - PARAM_KEYS}"
    for key in ("label", "helpText"):
        assert isinstance(p.get(key), str) and p[key].strip(), f"{name}: empty {key}"
    assert p.get("paramType") in PARAM_TYPES
    assert p["paramType"] == EXPECTED_TYPES.get(name, "TEXT")
    assert isinstance(p.get("isOptional"), bool)
    assert isinstance(p.get("regexes", []), list)
    for rx in p.get("regexes", []):
        re.compile(rx)


@pytest.mark.parametrize("name", [d for d in _dests() if d not in EXCLUDED])
def test_regexes_accept_the_default_and_a_valid_value_the_parser_takes(name):
    """Each regex accepts the parser's default (where there is one) and an example value; the example, passed
    as --name=value like the launcher does, parses to the option's type."""
    action = next(a for a in _options() if a.dest == name)
    regexes = _params()[name].get("regexes", [])
    values = [] if action.default is None else [str(action.default)]
    values += list(action.choices or []) + ([SAMPLES[name]] if name in SAMPLES else [])
    assert values, f"give {name} an example value in SAMPLES"
    for v in values:
        for rx in regexes:
            assert re.fullmatch(rx, v), f"{name}: {rx!r} rejects {v!r}"
        ns, rest = job_mod.build_parser().parse_known_args([f"--{name}={v}"])
        assert rest == [] and getattr(ns, name) == (action.type or str)(v)
    if action.choices:
        assert all(not re.fullmatch(rx, "bogus") for rx in regexes)
        help_text = _params()[name]["helpText"]
        assert all(c in help_text for c in action.choices), f"{name}: helpText should list the choices"


def test_help_texts_follow_the_parser():
    """helpText states the parser's default where the parser's help does."""
    for a in _options():
        if a.dest in EXCLUDED or a.default is None or not a.help:
            continue
        m = re.search(r"\(default:? ([^);]+)\)", a.help)
        if m:
            assert m.group(1).split()[0] in _params()[a.dest]["helpText"], a.dest


def test_is_optional_false_exactly_for_the_documented_required_parameters():
    assert {n for n, p in _params().items() if not p["isOptional"]} == set(REQUIRED)


@needs_beam
def test_seed_file_is_what_dataflow_requires():
    """Why seed_file is required: the same options on DataflowRunner fail without it, and pass with it."""
    base = ["--output_topic=projects/p/topics/releases", "--dead_letter=projects/p/topics/dead",
            "--runner=DataflowRunner"]
    with pytest.raises(job_mod.OptionError, match="--seed_file is required with DataflowRunner"):
        job_mod.parse_args(base + ["--seed_registry=gs://b/reg.jsonl"])
    with pytest.raises(job_mod.OptionError, match="--seed_registry is required with DataflowRunner"):
        job_mod.parse_args(base + ["--seed_file=gs://secrets/dpstream/seed"])
    base.append("--seed_registry=gs://b/reg.jsonl")
    job, beam_args = job_mod.parse_args(base + ["--seed_file=gs://secrets/dpstream/seed"])
    assert job.seed_file == "gs://secrets/dpstream/seed" and beam_args == ["--runner=DataflowRunner"]


# --------------------------------------------------------------------------- (c) never a seed value

def test_no_parameter_carries_a_seed_value():
    secretish = re.compile(r"seed|secret|key|random_state|entropy|password|token", re.I)
    for name, p in _params().items():
        assert name not in ("seed", "master_seed", "seed_value", "seed_hex", "random_state", "secret"), name
        if secretish.search(name):  # seed_file, seed_registry: Cloud Storage paths only
            assert p["paramType"].startswith("GCS_") and all(rx.startswith("^gs://") for rx in p["regexes"]), \
                f"{name}: a secret is passed as a file path, never as a value"
        assert "defaultValue" not in p
    assert "seed" not in _dests()


# --------------------------------------------------------------------------- (d) gcloud accepts the spec

def test_gcloud_builds_the_template_spec(tmp_path):
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        pytest.skip("gcloud (Google Cloud SDK) is not installed: cannot check the spec with "
                    "`gcloud dataflow flex-template build --print-only`")
    env = dict(os.environ, CLOUDSDK_CONFIG=str(tmp_path / "gcloud-config"), CLOUDSDK_CORE_DISABLE_PROMPTS="1")
    out = subprocess.run(
        [gcloud, "dataflow", "flex-template", "build", "gs://bucket/t.json", "--image=gcr.io/p/dpstream:test",
         "--sdk-language=PYTHON", f"--metadata-file={METADATA}", "--print-only"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # printed as a YAML block scalar ("|-" then the indented JSON)
    spec = json.loads(out.stdout[out.stdout.index("{"):])
    assert spec["image"] == "gcr.io/p/dpstream:test"
    assert spec["sdkInfo"]["language"] == "PYTHON"
    assert spec["metadata"]["name"] == _metadata()["name"] == "dpstream DP streaming k-means"
    assert [p["name"] for p in spec["metadata"]["parameters"]] == [p["name"] for p in _metadata()["parameters"]]


# --------------------------------------------------------------------------- templates/main.py

def _load_template_main(monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # no templates/__pycache__
    spec = importlib.util.spec_from_file_location("dpstream_template_main", TEMPLATES / "main.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_template_main_submits_without_waiting(monkeypatch):
    mod = _load_template_main(monkeypatch)
    calls = []
    monkeypatch.setattr(mod, "run", lambda argv, wait=True: calls.append((argv, wait)))
    assert mod.main(["--input_subscription=projects/p/subscriptions/s", "--runner=DataflowRunner"]) == 0
    assert calls == [(["--input_subscription=projects/p/subscriptions/s", "--runner=DataflowRunner"], False)]


@needs_beam
def test_template_main_exits_2_with_one_line_on_bad_options(tmp_path):
    out = subprocess.run([sys.executable, str(TEMPLATES / "main.py"), "--epsilon=0", "--output=x"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpstream: error: ") and "epsilon" in lines[0], out.stderr
    assert not (tmp_path / "x").exists()


# --------------------------------------------------------------------------- requirements and Dockerfile

def _setup_keyword(name: str):
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"setup.py has no {name}")


def test_requirements_pin_exactly_setup_py_install_requires_with_the_gcp_extra():
    """The image runs on Dataflow, so it installs the ``gcp`` extra: each of install_requires pinned, a
    package the extra names again (apache-beam) pinned with the extra's own extras ([gcp])."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    lines = [ln.strip() for ln in (TEMPLATES / "requirements.txt").read_text().splitlines()]
    pins = {canonicalize_name(r.name): r for r in map(Requirement, (ln for ln in lines if ln and ln[0] != "#"))}
    wanted = {canonicalize_name(r.name): r for r in map(Requirement, _setup_keyword("install_requires"))}
    gcp = {canonicalize_name(r.name): r for r in map(Requirement, _setup_keyword("extras_require")["gcp"])}
    assert gcp["apache-beam"].extras == {"gcp"}
    wanted.update(gcp)
    assert set(pins) == set(wanted)
    for name, pin in pins.items():
        (spec,) = pin.specifier
        assert spec.operator == "==", f"{name} is not pinned"
        assert pin.extras == wanted[name].extras, name
        assert wanted[name].specifier.contains(spec.version), f"{name}=={spec.version} violates setup.py"


def test_dockerfile_points_at_files_that_exist():
    text = (TEMPLATES / "Dockerfile").read_text()
    assert re.search(r"^FROM gcr\.io/dataflow-templates-base/python311-template-launcher-base\b", text, re.M)
    env = dict(re.findall(r"(FLEX_TEMPLATE_PYTHON_\w+)=(\S+)", text))
    assert set(env) == {"FLEX_TEMPLATE_PYTHON_PY_FILE", "FLEX_TEMPLATE_PYTHON_REQUIREMENTS_FILE",
                        "FLEX_TEMPLATE_PYTHON_SETUP_FILE"}
    assert env["FLEX_TEMPLATE_PYTHON_SETUP_FILE"] == "/template/setup.py"
    copied = {}
    for src, dst in re.findall(r"^COPY (.+) (\S+)$", text, re.M):
        for s in src.split():
            assert (ROOT / s).exists(), f"COPY {s}: no such file in the repository"
            copied[s] = dst
    for path in env.values():  # each /template/<p> is copied from <p>
        rel = path.removeprefix("/template/")
        assert rel in copied or any(rel.startswith(s + "/") for s in copied), path
    for pkg in ("dpstream", "transforms", "pipelines", "setup.py", "README.md"):  # README.md: setup.py reads it
        assert pkg in copied, pkg
