"""The README and docs/ say what the code does: the options page is generated from the option table,
every fault row names a real test, every relative link leads somewhere, and the README stays a front page."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from pytest_specbench.settings.options import OPTIONS
from pytest_specbench.settings.reference import REGENERATE, options_markdown

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
README_MAX_LINES = 150


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _table(text: str, title: str) -> list[list[str]]:
    """The cells of the first table after the heading ``title``, header and rule left out."""
    section = ("\n" + text).split(f"\n{title}\n", 1)[1]
    lines = [line for line in re.split(r"\n\n#+ ", section)[0].splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[2:]]


def test_the_options_page_is_generated_from_the_option_table() -> None:
    page = DOCS / "options.md"
    assert page.is_file() and _text(page) == options_markdown(), (
        f"docs/options.md is not what the option table renders; regenerate it with: {REGENERATE}"
    )


def test_the_options_page_lists_every_option_once_and_nothing_else() -> None:
    rows = _table(options_markdown(), "# Options")
    assert [row[0].strip("`").partition("=")[0] for row in rows] == [option.cli for option in OPTIONS]
    assert [row[1].strip("`") for row in rows] == [option.dest for option in OPTIONS]


FAULT_ROWS = _table(_text(DOCS / "faults.md"), "# Bad inputs and faults")


def test_the_faults_page_has_its_table() -> None:
    assert len(FAULT_ROWS) >= 30


@pytest.mark.parametrize("row", FAULT_ROWS, ids=[row[0][:40] for row in FAULT_ROWS])
def test_every_fault_row_names_a_test_that_exists(row: list[str]) -> None:
    path, _, name = row[2].strip("`").partition("::")
    module = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    tests = {node.name for node in module.body if isinstance(node, ast.FunctionDef)}
    assert re.fullmatch(r"test_\w+", name) and name in tests, row[2]


_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _links(path: Path) -> list[str]:
    """Link targets of a Markdown page, code blocks and code spans left out."""
    text = _CODE.sub("", _FENCE.sub("", _text(path)))
    return _LINK.findall(text)


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = [
        line.lstrip("#").strip() for line in _FENCE.sub("", _text(path)).splitlines() if re.match(r"#{1,6} ", line)
    ]
    return {re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-") for heading in headings}


RELATIVE_LINKS = [
    (page, target) for page in PAGES for target in _links(page) if not re.match(r"^[a-z][a-z0-9+.-]*:", target)
]


def test_the_pages_have_links() -> None:
    assert any(page == README for page, _ in RELATIVE_LINKS)


@pytest.mark.parametrize(
    "page,target", RELATIVE_LINKS, ids=[f"{page.relative_to(ROOT)}->{target}" for page, target in RELATIVE_LINKS]
)
def test_every_relative_link_points_to_a_file_that_exists(page: Path, target: str) -> None:
    file_part, _, anchor = target.partition("#")
    linked = (page.parent / file_part).resolve() if file_part else page
    assert linked.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"
    if anchor and linked.suffix == ".md":
        assert anchor in _anchors(linked), f"{page.relative_to(ROOT)} links to {target}: no such heading"


def test_the_readme_is_a_front_page() -> None:
    lines = len(_text(README).splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; move detail into docs/ (at most {README_MAX_LINES})"
    )


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    commands = re.findall(
        r"```bash\n(.*?)\n```",
        _text(README).split("\n## Set-up and the two commands\n", 1)[1].split("\n## ", 1)[0],
        re.S,
    )
    assert len(commands) == 2
    assert commands[1] in _text(ROOT / ".ci" / "run").splitlines()
