"""The docs match the code: every job option the README and the guide name exists, the README
links the guide, and every warning the guide lists is one the job can print."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "choosing-parameters.md"


def _options():
    pytest.importorskip("apache_beam", exc_type=ImportError)
    from pipelines.dp_stream_cluster import build_parser
    return {s for a in build_parser()._actions for s in a.option_strings}


@pytest.mark.parametrize("doc", ["README.md", "docs/choosing-parameters.md", "SECURITY.md", "docs/job.md",
                                 "docs/library.md", "docs/internals.md"])
def test_every_option_the_docs_name_exists(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z_]+", text))
    beam_or_make = {"--runner", "--project", "--region", "--direct_num_workers", "--direct_running_mode",
                    "--compile-bytecode", "--print-only", "--parameters", "--image", "--sdk-language",
                    "--metadata-file", "--template-file-gcs-location", "--service-account-email", "--sweep",
                    "--host", "--port", "--subscription", "--timeout", "--max_releases", "--seeds", "--dry_run"}
    unknown = named - _options() - beam_or_make
    assert not unknown, f"{doc} names options the job does not have: {sorted(unknown)}"


def test_the_readme_links_the_guide():
    assert "docs/choosing-parameters.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert GUIDE.exists()


def test_the_guides_warnings_are_the_jobs():
    """Each backticked warning text in the guide's table is a fragment of a message in the code."""
    code = "".join((ROOT / p).read_text(encoding="utf-8") for p in
                   ("pipelines/summary.py", "pipelines/job/launch.py", "pipelines/job/arguments.py",
                    "pipelines/sources.py"))
    code = re.sub(r"\{[^}]*\}", "…", code)  # f-string fields
    code = re.sub(r'"\s*\n\s*f?"', "", code)  # implicit string concatenation across lines
    from transforms.parse import REASONS
    table = GUIDE.read_text(encoding="utf-8").split("## What the job tells you")[1]
    fields = r"…|N of M|N |p%|--\w+|" + "|".join(REASONS)  # what the code fills in
    rows = re.findall(r"^\| `([^`]+)`", table, re.M)
    assert len(rows) >= 10
    for row in rows:
        words = [w for w in re.split(fields, row.replace("at launch: ", "")) if w.strip(" ()/`")]
        for w in words:
            assert w.strip(" ()/`") in code, f"the guide's warning {row!r}: {w!r} is not in the code"


def test_security_states_group_privacy_with_delta_rows_as_records_and_what_decides_after_close():
    """SECURITY.md: group privacy keeps δ (one run: m·e^{(m−1)ε}·δ; m runs: m·δ), a message of m rows is
    m records, and the after_close drop is stated as depending on the watermark (other messages), not
    as a function of the record's own delay alone."""
    text = " ".join((ROOT / "SECURITY.md").read_text(encoding="utf-8").split())
    assert "(m·ε, m·e^{(m−1)ε}·δ)" in text and "(m·ε, m·δ)" in text
    assert "m rows is m records" in text
    assert "not of any other record's content" not in text
    assert "watermark" in text and "*other messages*" in text and "after_close" in text
    from dpstream.plan_text import RUNS_NOTE  # what every release of a run sequence says
    assert "(m·ε, m·δ)" in RUNS_NOTE and "m·e^((m−1)ε)·δ" in RUNS_NOTE


def _privacy_doc():
    return (ROOT / "docs" / "privacy.md").read_text(encoding="utf-8")


def test_every_test_the_privacy_invariants_name_exists():
    """docs/privacy.md names, for each invariant, the tests that check it (``file::test``, or ``::test``
    for another test of the file named last): each must be a test function of that file."""
    text = _privacy_doc()
    named, current = [], None
    for m in re.finditer(r"`(tests/[\w/]+\.py)?::(test_\w+)`|`(tests/[\w/]+\.py)`", text):
        if m.group(3):
            current = m.group(3)
            continue
        current = m.group(1) or current
        named.append((current, m.group(2)))
    assert len(named) >= 60
    for path, test in named:
        src = (ROOT / path).read_text(encoding="utf-8")
        assert re.search(rf"^def {test}\(", src, re.M), f"docs/privacy.md names {path}::{test}, which does not exist"


def test_every_invariant_cited_in_the_repository_is_defined():
    """Code, tests and docs cite the invariants as P1…P21: each cited number has its paragraph."""
    defined = set(re.findall(r"^\*\*P(\d+)\.", _privacy_doc(), re.M))
    assert defined == {str(i) for i in range(1, len(defined) + 1)} and len(defined) >= 15
    cited = set()
    for path in ROOT.rglob("*"):
        if path.suffix not in (".py", ".md") or any(p == ".git" or p.startswith(".venv") for p in path.parts):
            continue
        cited |= set(re.findall(r"(?<![\w/])P(\d+)(?![\w.])", path.read_text(encoding="utf-8", errors="ignore")))
    assert cited - defined == set(), f"cited but not defined in docs/privacy.md: {sorted(cited - defined)}"


def test_the_readme_is_a_front_page_that_links_the_moved_docs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    for doc in ("docs/job.md", "docs/library.md", "docs/internals.md", "docs/choosing-parameters.md"):
        assert doc in text and (ROOT / doc).exists()
    assert "non_private/" in text  # where the NON-PRIVATE evaluation goes


def test_the_guide_has_a_utility_table_and_a_paragraph_to_sign():
    text = GUIDE.read_text(encoding="utf-8")
    assert "### Utility against ε" in text and "| 0.25 |" in text and "| 4 |" in text
    assert "What you can tell a compliance reviewer" in text
