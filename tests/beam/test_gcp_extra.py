"""Beam's Google Cloud support is the ``dpstream[gcp]`` extra: the check that finds it agrees with what Beam's
Dataflow runner and gs:// filesystem import; without it a Dataflow runner or a gs:// path is one line naming
the install, before anything runs; a local run is unaffected and prints no warning about it."""
from __future__ import annotations

import importlib.abc
import logging
import sys

import numpy as np
import pytest

pytest.importorskip("apache_beam")

from pipelines.job import cli, gcp_extra  # noqa: E402
from pipelines.job.options import OptionError  # noqa: E402


class _Uninstalled(importlib.abc.MetaPathFinder):
    """The extra's modules as if not installed: found by no finder, absent from sys.modules."""

    def find_spec(self, name, path=None, target=None):
        if any(name == m or name.startswith(m + ".") for m in gcp_extra.MODULES):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


@pytest.fixture
def without_gcp(monkeypatch):
    for name in list(sys.modules):
        if any(name == m or name.startswith(m + ".") for m in gcp_extra.MODULES):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_Uninstalled(), *sys.meta_path])
    assert gcp_extra.missing_modules() == list(gcp_extra.MODULES)


def _imports(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def test_the_check_agrees_with_what_beams_dataflow_runner_and_gcs_filesystem_import():
    """In whichever environment the tests run (with or without the extra): the modules the check looks for
    are missing exactly when Beam cannot load its Dataflow client or its gs:// filesystem."""
    gone = gcp_extra.missing_modules()
    assert _imports("apache_beam.runners.dataflow.internal.apiclient") == ("google.cloud.dataflow" not in gone)
    assert _imports("apache_beam.io.gcp.gcsfilesystem") == ("google.cloud.storage" not in gone)


def _job_argv(tmp_path, *extra):
    np.save(tmp_path / "x.npy", np.random.default_rng(0).normal(size=(50, 2)))
    return [f"--input={tmp_path / 'x.npy'}", "--dim=2", "--radius=5", "--tick_size=10", "--horizon_ticks=5",
            *extra]


@pytest.mark.parametrize("extra, option", [
    (["--output=gs://b/out", "--runner=DataflowRunner", "--project=p", "--region=r",
      "--temp_location=gs://b/t", "--seed_file=gs://b/seed", "--seed_registry=gs://b/seeds.jsonl"],
     "--runner=DataflowRunner"),
    (["--output=gs://b/out"], "--output gs://b/out"),
    (["--output=OUT", "--seed_file=gs://b/seed"], "--seed_file gs://b/seed"),
])
def test_without_the_extra_a_dataflow_runner_or_gs_path_is_one_line_naming_the_install(
        tmp_path, capsys, without_gcp, extra, option):
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in _job_argv(tmp_path, *extra)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"dpstream: error: {option} needs Beam's Google Cloud support, which is not installed "
                   f"(no google.cloud.dataflow, google.cloud.storage): pip install 'dpstream[gcp]'"]
    assert not (tmp_path / "out").exists()


def test_without_the_extra_a_gs_input_names_the_install_not_an_empty_glob(without_gcp):
    from pipelines.job.arguments import parse_args

    with pytest.raises(OptionError, match=r"^--input gs://b/x\*\.npy needs .*pip install 'dpstream\[gcp\]'$"):
        parse_args(["--input=gs://b/x*.npy", "--dim=2", "--radius=5", "--tick_size=10", "--horizon_ticks=5",
                    "--output=out"])


def test_with_the_extra_the_check_lets_a_dataflow_job_through(monkeypatch):
    from pipelines.job.arguments import parse_args

    monkeypatch.setattr(gcp_extra, "missing_modules", lambda: [])
    job, _ = parse_args(["--output_topic=projects/p/topics/r", "--dead_letter=projects/p/topics/d",
                         "--runner=DataflowRunner", "--seed_file=gs://b/seed", "--seed_registry=gs://b/r.jsonl"])
    gcp_extra.check_job(job)  # no error: Beam's own runner takes over from here


def _launch_logging_beams_warnings(job, beam_args):
    logging.getLogger("apache_beam.io.filesystems").warning(
        "Failed to import GCSFileSystem; loading of this filesystem will be skipped. Error details: x")
    logging.warning("apitools not found, and bigquery client libraries are not available despite the import "
                    "not raising an ImportError.")
    logging.getLogger("apache_beam.io.filesystems").warning("Failed to import S3FileSystem; y")
    raise OptionError("stop here")


def test_the_command_without_the_extra_hides_beams_two_warnings_about_it(tmp_path, monkeypatch, caplog,
                                                                          without_gcp):
    """What ``import apache_beam`` logs without the extra is dropped by the command; any other warning of
    Beam's still shows."""
    monkeypatch.setattr(cli, "launch", _launch_logging_beams_warnings)
    assert cli.main(_job_argv(tmp_path, f"--output={tmp_path / 'out'}")) == 2
    assert caplog.messages == ["Failed to import S3FileSystem; y"]


def test_the_command_with_the_extra_hides_nothing(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(gcp_extra, "missing_modules", lambda: [])
    monkeypatch.setattr(cli, "launch", _launch_logging_beams_warnings)
    assert cli.main(_job_argv(tmp_path, f"--output={tmp_path / 'out'}")) == 2
    assert [m.split(" ")[0] for m in caplog.messages] == ["Failed", "apitools", "Failed"]
