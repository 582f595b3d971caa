"""The command keeps the memory its process frees (pipelines/job/memory.py) for a local batch run only, and
only as the command: a process that calls ``main(argv)`` keeps its allocator."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("apache_beam", exc_type=ImportError)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_freed_memory_applies_and_large_buffers_still_work():
    code = ("import numpy as np\nfrom pipelines.job.memory import keep_freed_memory\nassert keep_freed_memory()\n"
            "for i in range(4):\n    x = np.ones((1 << 23) + i)\n    assert x.sum() == x.size\n    del x\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("extra, applied", [([], True), (["--plan_only"], False), (["--as_a_call"], False),
                                            (["--runner=DataflowRunner", "--project=p", "--region=r",
                                              "--temp_location=gs://b/t", "--seed_file=gs://b/seed",
                                              "--seed_registry=gs://b/seeds.jsonl"], False)])
def test_the_command_keeps_freed_memory_only_for_a_local_batch_run(tmp_path, monkeypatch, extra, applied):
    import numpy as np

    from pipelines.job import cli, memory

    import gc

    calls, collects = [], []
    monkeypatch.setattr(memory, "keep_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setattr(memory, "collect_less_often", lambda: collects.append(1))
    smalls = []
    monkeypatch.setattr(memory, "small_pages_for_arrays", lambda: smalls.append(1) or True)
    before = gc.get_threshold()
    monkeypatch.setattr(cli, "_GC_BEFORE", (before[0] + 1,) + before[1:])  # as command() leaves it for main()

    class Stop(Exception):
        pass

    launched = []

    def fake_launch(job, beam_args):
        launched.append(job.runner)
        if job.plan_only:
            return "plan"
        raise Stop("launched")

    monkeypatch.setattr(cli, "launch", fake_launch)
    np.save(tmp_path / "x.npy", np.zeros((10, 2)))
    argv = [f"--input={tmp_path}/x.npy", f"--output={tmp_path}/out", "--dim=2", "--radius=1", "--k=2",
            "--tick_size=5", "--horizon_ticks=2"] + extra
    try:
        if "--as_a_call" in argv:  # main(argv) from a caller's process (tests, notebooks): its allocator is its own
            cli.main([a for a in argv if a != "--as_a_call"])
        else:  # the command: main() reads the process's own command line
            monkeypatch.setattr(sys, "argv", ["dpstream"] + argv)
            cli.main()
        after = gc.get_threshold()
    finally:
        gc.set_threshold(*before)
    assert len(launched) == 1  # the options were accepted: the run would have started
    assert bool(calls) == applied
    assert bool(collects) == applied  # the collector's thresholds: the same runs only
    assert bool(smalls) == applied  # numpy's huge pages: the same runs only
    assert (after == cli._GC_BEFORE) == (not applied)  # any other run: the thresholds command() found


def test_the_command_raises_the_collector_thresholds_before_it_parses_the_options(monkeypatch):
    import gc

    from pipelines.job import cli, memory

    seen = []
    monkeypatch.setattr(cli, "main", lambda: seen.append(gc.get_threshold()) or 0)
    monkeypatch.setattr(cli, "_ENDS_PROCESS", False)
    monkeypatch.setattr(cli, "_GC_BEFORE", None)
    before = gc.get_threshold()
    try:
        assert cli.command() == 0
    finally:
        gc.set_threshold(*before)
    assert seen == [memory.GC_THRESHOLDS]
    assert cli._GC_BEFORE == before


def test_collect_less_often_raises_the_thresholds_and_garbage_cycles_are_still_collected():
    code = ("import gc, weakref\nfrom pipelines.job.memory import GC_THRESHOLDS, collect_less_often\n"
            "collect_less_often()\nassert gc.get_threshold() == GC_THRESHOLDS, gc.get_threshold()\n"
            "class Node:\n    pass\n"
            "a = Node(); a.self = a; ref = weakref.ref(a); del a\n"
            "keep = [[] for i in range(2000)]\n"  # past the default threshold (700), a young collection would have run
            "assert ref() is not None\n"
            "keep += [[] for i in range(GC_THRESHOLDS[0])]\n"  # past the raised one: collected
            "assert ref() is None\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_small_pages_for_arrays_turns_numpy_huge_page_advice_off_and_arrays_still_work():
    code = ("import numpy as np\nfrom pipelines.job.memory import small_pages_for_arrays\n"
            "from numpy._core import multiarray\n"
            "assert multiarray._set_madvise_hugepage(True) is not None\n"  # numpy has the switch
            "assert small_pages_for_arrays()\n"
            "assert multiarray._set_madvise_hugepage(False) is False\n"  # returns the setting it replaces
            "x = np.ones(1 << 23)\nassert x.sum() == x.size\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
