"""Entry file of the dpstream Dataflow Flex Template (FLEX_TEMPLATE_PYTHON_PY_FILE).

The launcher calls ``python main.py --runner=DataflowRunner --project=… --region=… …
--<parameter>=<value> …``; this builds the job and submits it without waiting: a Flex
Template launcher must exit once the job is submitted. Errors in the options exit 2 with
one line, like ``dpstream`` (``pipelines.dp_stream_cluster.main``).
"""
from __future__ import annotations

import logging
import os
import sys

# The image pip-installs the package; the repository root (this file's parent's parent) is
# a fallback so the file also runs from a source checkout. Appended: an installed copy wins.
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipelines.dp_stream_cluster import OptionError, run  # noqa: E402
from pipelines.job.gcp_extra import quiet_missing_extra  # noqa: E402


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("apache_beam", "absl"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    quiet_missing_extra(logging.getLogger().handlers)  # the image has the extra; a checkout may not
    try:
        run(sys.argv[1:] if argv is None else argv, wait=False)
    except OptionError as e:
        print(f"dpstream: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
