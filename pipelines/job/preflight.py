"""Pre-flight checks of the output places, before the pipeline starts: a path the job cannot write fails
with one line (:class:`~pipelines.job.options.OptionError`) instead of a Beam traceback minutes later."""
from __future__ import annotations

import os
import sys
import tempfile
from typing import Optional

from pipelines.job.description import Job, join
from pipelines.job.options import OptionError

OUTPUT_FILES = ("releases.jsonl", "non_private/dead_letter.jsonl")
REPORT_FILES = ("centers.json", "privacy_plan.md", "non_private/evaluation.json", "non_private/report.png")


def _local(path: Optional[str]) -> bool:
    return bool(path) and "://" not in path and not path.startswith("projects/")


def _check_dir(path: str, subject: str) -> None:
    """Create the directory ``path`` if needed and check this process can write in it (and make a
    folder in it, as Beam's file sinks do); one-line OptionError about ``subject`` otherwise."""
    fix = "choose a path you can write"
    if os.path.exists(path) and not os.path.isdir(path):
        raise OptionError(f"cannot write {subject}: {path} is a file, not a directory; {fix}")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        why = "a part of the path is a file" if isinstance(e, (NotADirectoryError, FileExistsError)) \
            else (e.strerror or str(e))
        raise OptionError(f"cannot write {subject}: cannot create {path}: {why}; {fix}") from None
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".dpstream-probe-", dir=path))
    except OSError as e:
        raise OptionError(f"cannot write {subject}: {path}: {e.strerror or e}; {fix}") from None


def check_outputs(job: Job) -> None:
    """Check (and create) the local output places before the pipeline starts, so a bad path fails
    with one line instead of a Beam traceback; say which files a re-run overwrites."""
    if _local(job.output):
        _check_dir(job.output, f"--output {job.output}")
        for name in OUTPUT_FILES + REPORT_FILES:
            if os.path.isdir(os.path.join(job.output, name)):
                raise OptionError(f"--output {job.output} holds a directory named {name}, where the job writes a "
                                  f"file: remove it or choose another --output")
    if _local(job.dead_letter):
        if os.path.isdir(job.dead_letter):
            raise OptionError(f"--dead_letter {job.dead_letter} is a directory: give a file path (e.g. "
                              f"{join(job.dead_letter, 'dead_letter.jsonl')})")
        _check_dir(os.path.dirname(os.path.abspath(job.dead_letter)), f"--dead_letter {job.dead_letter}")
    ours = []
    if _local(job.output):
        ours.append(join(job.output, "releases.jsonl"))
        if job.report:
            ours += [join(job.output, n) for n in REPORT_FILES]
    if _local(job.dead_letter):
        ours.append(job.dead_letter)
    again = [f for f in ours if os.path.exists(f)]
    if again:
        print(f"dpstream: overwriting the files of an earlier run: {', '.join(again)}", file=sys.stderr)
        if job.streaming:  # the streaming file sink appends: start from empty files
            for f in again:
                os.remove(f)
    from pipelines.outputs import check_remote, remove_stale_evaluation
    if _local(job.output):
        remove_stale_evaluation(job.output)  # an earlier run's NON-PRIVATE evaluation describes other releases
    elif job.output and "://" in job.output:
        try:
            check_remote(job.output, "--output")
        except ValueError as e:
            raise OptionError(str(e)) from None
