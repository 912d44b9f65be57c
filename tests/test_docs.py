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
import shlex
from pathlib import Path

import click
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


def test_every_docs_page_is_in_the_readme() -> None:
    # QA (2026-12-02): docs/ray.md and docs/environments.md were in docs/README.md only,
    # so a reader of the README's documentation table never found them. docs/security.md
    # points at SECURITY.md, which the table lists.
    listed = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    pages = {p.resolve() for p in (ROOT / "docs").glob("*.md")}
    unlisted = (
        pages - listed - {(ROOT / "docs" / n).resolve() for n in ("README.md", "security.md")}
    )
    assert unlisted == set(), f"pages missing from README.md's documentation table: {unlisted}"


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


# Every `execgym ...` command the pages show must parse with the CLI of this checkout: a
# renamed option or command fails here instead of in a new user's shell. Synopses are
# read as commands: `[x]` is x, `...` is nothing, and a value in capitals (BATCH, ID) is
# a positional argument. Files the command must find (tasks.jsonl, spec.json, tasks/)
# are made empty in a scratch directory, so click's own checks run on them.
COMMAND_PAGES = [ROOT / "README.md", *(p for p in PAGES if p.parent.name == "docs")]
COMMAND = re.compile(r"^(?:[A-Z_]+=\S+\s+)*(?:\.venv/bin/)?(execgym\s.*)$")
SPAN = re.compile(r"`((?:\.venv/bin/)?execgym [^`]+)`")


def commands(page: Path) -> list[tuple[str, str]]:
    """``page``'s ``execgym ...`` commands as ``(kind, command)``.

    ``kind`` is ``"run"`` for a line of a code block, to be parsed in full, or
    ``"mention"`` for a code span in prose or a synopsis with placeholders in capitals
    (``--keep-versions N``): its commands and option names must exist.
    """
    found, fenced = [], False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            match = COMMAND.match(line.strip().lstrip("$ "))
            if match:
                command = match.group(1)
                placeholder = re.search(r"(?<![\w=])[A-Z][A-Z_]*\b(?!=)", command.split("#")[0])
                found.append(("mention" if placeholder else "run", command))
        else:
            found += [("mention", m.removeprefix(".venv/bin/")) for m in SPAN.findall(line)]
    return found


def argv(command: str) -> list[str]:
    """``command``'s arguments after ``execgym``, up to a pipe, a ``;`` or a comment."""
    lexer = shlex.shlex(
        command.replace("[", " ").replace("]", " "), posix=True, punctuation_chars=True
    )
    lexer.whitespace_split = True
    words = []
    for word in lexer:
        if word[0] in "();<>|&":
            break
        if word != "...":
            words.append(word)
    return words[1:]


DOC_COMMANDS = sorted(
    {(p.relative_to(ROOT).as_posix(), *c) for p in COMMAND_PAGES for c in commands(p)}
)


@pytest.mark.parametrize(
    ("page", "kind", "command"), DOC_COMMANDS, ids=[f"{p}: {c}" for p, _, c in DOC_COMMANDS]
)
def test_documented_commands_parse(
    page: str, kind: str, command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from execgym.cli import main

    args = argv(command)
    monkeypatch.chdir(tmp_path)
    for word in args:
        if word.endswith("/") and "://" not in word:
            (tmp_path / word).mkdir(parents=True, exist_ok=True)
        elif re.search(r"\.(jsonl|json|gz)$", word) and "://" not in word:
            (tmp_path / word).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / word).touch()
    try:
        _parse(main, args) if kind == "run" else _names_exist(main, args)
    except click.exceptions.Exit as done:  # --help, --version
        if done.exit_code != 0:
            pytest.fail(f"{page}: `{command}` exits {done.exit_code}")
    except click.UsageError as error:
        pytest.fail(f"{page}: `{command}`: {error.format_message()}")


def _parse(command: click.Command, args: list[str]) -> None:
    """Parse ``args`` with ``command`` and the subcommands they name (raises click's errors).

    A group's own options are parsed by :meth:`click.Command.parse_args`, which hands back
    the rest (the subcommand's name and its arguments) as it is.
    """
    parent: click.Context | None = None
    name = "execgym"
    while isinstance(command, click.Group):
        ctx = click.Context(command, info_name=name, parent=parent)
        rest = click.Command.parse_args(command, ctx, list(args))
        if not rest:
            return  # a group named without a command: a synopsis of its commands
        name, *args = rest
        sub = command.get_command(ctx, name)
        if sub is None:
            raise click.UsageError(f"no command {name!r} in {ctx.command_path}")
        command, parent = sub, ctx
    # Options, choices, callbacks (--memory 256MiB), argument counts and paths.
    command.make_context(name, list(args), parent=parent)


def _names_exist(command: click.Command, args: list[str]) -> None:
    """The commands ``args`` name exist, and so does each ``--option`` they name."""
    ctx = click.Context(command, info_name="execgym")
    words = [w for w in args if not w.startswith("-")]
    while isinstance(command, click.Group) and words:
        sub = command.get_command(ctx, words[0])
        if sub is None:
            raise click.UsageError(f"no command {words[0]!r} in {ctx.command_path}")
        command, ctx = sub, click.Context(sub, info_name=words.pop(0), parent=ctx)
    known = {o for p in command.get_params(ctx) for o in (*p.opts, *p.secondary_opts)}
    for word in args:
        option = word.partition("=")[0]
        if option.startswith("--") and option not in known:
            raise click.UsageError(f"{ctx.command_path} has no option {option}")


def test_the_pages_show_commands() -> None:
    # The extraction above finds what the README shows: a regex that matched nothing
    # would make test_documented_commands_parse vacuous.
    readme = {c for p, kind, c in DOC_COMMANDS if p == "README.md" and kind == "run"}
    assert "execgym score --dataset humaneval --solutions canonical -o results.jsonl" in readme
    assert len(DOC_COMMANDS) > 30


def _all_commands() -> list[list[str]]:
    from execgym.cli import main

    found: list[list[str]] = [[]]
    ctx = click.Context(main)
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        found.append([name])
        if isinstance(command, click.Group):
            found += [[name, sub] for sub in command.list_commands(ctx)]
    return found


@pytest.mark.parametrize("path", _all_commands(), ids=lambda p: " ".join(["execgym", *p]))
def test_every_command_has_help(path: list[str]) -> None:
    from click.testing import CliRunner

    from execgym.cli import main

    result = CliRunner().invoke(main, [*path, "--help"], prog_name="execgym")
    assert result.exit_code == 0, result.output
    assert "Usage: execgym" in result.output
    assert "Show this message and exit." in result.output


# A source file a page names in prose (`src/execgym/judges/masking.py`) must exist:
# modules moved in issue 19, and a reader who opens a moved one finds nothing. A
# pattern (`src/execgym/guest/diagnose*.py`) must match a file.
SOURCE = re.compile(
    r"(?<![\w/.~-])(?:src/)?execgym/[\w/*]+\.py\b|(?<![\w/.~-])src/execgym/[\w/*.]+"
)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_source_files_exist(page: Path) -> None:
    missing = {
        name
        for name in SOURCE.findall(page.read_text())
        if not any((ROOT / "src").glob(name.removeprefix("src/").rstrip(".")))
    }
    assert not missing, f"{page.relative_to(ROOT)} names files that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_installs_come_from_the_checkout(page: Path) -> None:
    # execgym is installed from this repository (`pip install -e '.[server]'`); no package
    # index serves it, so `pip install 'execgym[server]'` fails for a new user or, worse,
    # installs whatever someone else published under that name.
    found = re.findall(
        r"pip install [^`\n#]*(?<![\w/.-])'?execgym(?:\[[\w,]+\])?'?(?![\w/.-])", page.read_text()
    )
    assert not found, f"{page.relative_to(ROOT)}: {found}: install from the checkout (-e '.[...]')"
