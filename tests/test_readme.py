"""The README's tables say what the code does: every option is listed, every fault row names a real test."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from pytest_specbench.settings.options import OPTIONS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _table(title: str) -> list[list[str]]:
    """The cells of the first table after the heading ``title``, header and rule left out."""
    section = README.split(f"\n{title}\n", 1)[1]
    lines = [line for line in section.split("\n\n## ")[0].splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[2:]]


def test_the_options_table_lists_every_option_once_and_nothing_else() -> None:
    listed = [row[0].strip("`") for row in _table("### Options")]
    assert listed == [option.cli for option in OPTIONS]
    for row, option in zip(_table("### Options"), OPTIONS):
        assert row[1].strip("`") == option.dest


FAULT_ROWS = _table("## Bad inputs and faults")


@pytest.mark.parametrize("row", FAULT_ROWS, ids=[row[0][:40] for row in FAULT_ROWS])
def test_every_fault_row_names_a_test_that_exists(row: list[str]) -> None:
    path, _, name = row[2].strip("`").partition("::")
    module = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    tests = {node.name for node in module.body if isinstance(node, ast.FunctionDef)}
    assert re.fullmatch(r"test_\w+", name) and name in tests, row[2]
