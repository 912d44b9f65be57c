"""The repository's Markdown: the README stays short, every link lands, nothing points outside.

Links are checked the way GitHub renders them: a relative link must name a file or
directory of this repository, and a ``#fragment`` must be the slug of a heading of the
page it names (GitHub's rule: lower case, punctuation other than ``-`` and ``_`` dropped,
spaces to ``-``, a repeated heading gets ``-1``, ``-2``...). Headings inside fenced code
blocks are not headings. Modules move (issue 19): a page that names a moved file fails
here instead of sending a reader to a 404.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
TOP_PAGES = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md", "SECURITY.md"]
PAGES = sorted([*(ROOT / name for name in TOP_PAGES), *(ROOT / "docs").rglob("*.md")])
# [text](target) outside code spans; images too. Autolinks and bare URLs are not checked.
LINK = re.compile(r"(?<!`)\[[^\]\n]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text: str) -> list[str]:
    """The lines of ``text`` outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor GitHub makes for ``page``'s headings."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(page.read_text()):
        match = re.match(r"#{1,6} (.+)", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    """The link targets in ``page``'s prose (code spans stripped first)."""
    targets = []
    for line in prose_lines(page.read_text()):
        targets += LINK.findall(re.sub(r"`[^`]*`", "``", line))
    return targets


def test_readme_is_short_and_keeps_the_test_command() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 300, f"README.md has {len(lines)} lines: move detail into docs/"
    # .ci/run runs this exact command after the checks; the README shows it as the way in.
    assert ".venv/bin/python -m pytest   # run the whole test suite" in lines


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve_inside_the_repository(page: Path) -> None:
    problems = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path_part, _, fragment = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if ROOT.resolve() not in (dest, *dest.parents):
            problems.append(f"{target}: outside the repository")
            continue
        if not dest.exists():
            problems.append(f"{target}: no such file")
            continue
        if fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            problems.append(f"{target}: no heading with anchor #{fragment} in {dest.name}")
    assert not problems, f"{page.relative_to(ROOT)}: " + "; ".join(problems)
    # The style guide used to live outside the repository (../shared/STYLE.md): a reader
    # of a clone has no such file. CONTRIBUTING.md holds what applies here.
    assert "shared/STYLE.md" not in page.read_text()


def test_every_docs_page_is_in_the_index() -> None:
    index = ROOT / "docs" / "README.md"
    listed = {(index.parent / t.partition("#")[0]).resolve() for t in links(index)}
    pages = {p.resolve() for p in (ROOT / "docs").glob("*.md") if p != index}
    assert pages - listed == set(), f"pages missing from docs/README.md: {pages - listed}"


def test_slug_follows_github() -> None:
    # GitHub's own anchors for headings of this repository's pages, read off github.com's
    # rendering rule (punctuation dropped, spaces to hyphens).
    assert slug("Rewards beyond pass/fail") == "rewards-beyond-passfail"
    assert slug("Tier `bwrap` (default)") == "tier-bwrap-default"
    assert slug("The HTTP service (`execgym serve`)") == "the-http-service-execgym-serve"
    assert slug("Trainers: verl, TRL, OpenRLHF") == "trainers-verl-trl-openrlhf"


def test_ci_runs_the_checks_before_the_tests() -> None:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    check = lines.index("scripts/check")
    tests = lines.index(".venv/bin/python -m pytest")
    assert check < tests  # lint, format and types fail CI before the suite starts
    assert (ROOT / "scripts" / "check").stat().st_mode & 0o111  # executable, as .ci/run calls it
