"""Atomic writes: whole files only, with the mode an ordinary open() would give."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pytest_specbench.atomic import write_atomic


def test_writes_whole_file_with_umask_mode_and_leaves_no_temporary(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "sub" / "out.csv", "a,b\n1,2\n")
    finally:
        os.umask(old)
    path = tmp_path / "sub" / "out.csv"
    assert path.read_text() == "a,b\n1,2\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [entry.name for entry in path.parent.iterdir()] == ["out.csv"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    write_atomic(path, "old")

    with pytest.raises(TypeError):
        write_atomic(path, 12345)  # type: ignore[arg-type]
    assert path.read_text() == "old"
    assert [entry.name for entry in tmp_path.iterdir()] == ["out.json"]
