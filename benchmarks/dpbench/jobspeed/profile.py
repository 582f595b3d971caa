"""The job under cProfile (the DirectRunner runs a batch pipeline in this process): where its time goes."""
from __future__ import annotations

import io
import os
import pstats
import sys

from .runs import job_argv, new_seed_file, timed


def profile_job(case, work: str, top: int = 30) -> str:
    """Markdown: the job's ``top`` functions by own time, then dpstream's stages by cumulative time."""
    out_dir = os.path.join(work, "profile_out")
    prof = os.path.join(work, "job.prof")
    argv = job_argv(case, out_dir, new_seed_file(os.path.join(work, "profile_seed")))
    argv = [sys.executable, "-m", "cProfile", "-o", prof] + argv[1:]
    t = timed(argv)
    if not t.ok:
        return f"(the profiled job failed: {t.tail})\n"
    lines = [f"cProfile of the job on {case.name} (wall {t.wall:.1f} s under the profiler):", ""]
    for key, title in (("tottime", "own time"), ("cumulative", "cumulative time, our stages")):
        buf = io.StringIO()
        st = pstats.Stats(prof, stream=buf).sort_stats(key)
        if key == "cumulative":
            st.print_stats(r"(transforms|pipelines|dpstream)/", top)
        else:
            st.print_stats(top)
        body = buf.getvalue()
        body = body[body.find("ncalls"):] if "ncalls" in body else body
        lines += [f"**{title}**", "", "```", body.rstrip().replace(os.path.dirname(os.path.dirname(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))))) + "/", ""), "```", ""]
    return "\n".join(lines) + "\n"
