"""``python -m pytest_specbench merge``'s outputs: each a path of its own, never an input, at least one; a clear
usage error (exit status 2, the command line's convention) and nothing written otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factory import run_document

from pytest_specbench.cli import main

_run = run_document


@pytest.fixture
def shards(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_run(["p-k1-x"], specbench_shard="1/2")))
    b.write_text(json.dumps(_run(["q-k1-x"], specbench_shard="2/2")))
    return a, b


def _files(folder: Path) -> dict[str, str]:
    return {path.name: path.read_text() for path in folder.iterdir() if path.is_file()}


def test_two_outputs_on_one_path_are_refused_and_nothing_is_written(shards, tmp_path, capsys) -> None:
    before = _files(tmp_path)
    out = tmp_path / "x"
    assert main(["merge", *map(str, shards), "--json", str(out), "--csv", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--json and --csv name the same file, {out}, and one would overwrite the other" in err
    assert _files(tmp_path) == before and not out.exists()


def test_an_output_on_one_of_the_inputs_is_refused_and_the_input_kept(shards, tmp_path, capsys) -> None:
    a, b = shards
    before = _files(tmp_path)
    assert main(["merge", str(a), str(b), "--json", str(a)]) == 2
    assert f"--json {a} is {a}, one of the runs merged, and would overwrite it" in capsys.readouterr().err
    (tmp_path / "link.md").symlink_to(b)  # a link to an input is that input
    assert main(["merge", str(a), str(b), "--report", str(tmp_path / "link.md")]) == 2
    assert "one of the runs merged" in capsys.readouterr().err
    assert {name: text for name, text in _files(tmp_path).items() if name != "link.md"} == before


def test_a_merge_with_no_output_is_an_error_naming_the_options(shards, capsys) -> None:
    assert main(["merge", *map(str, shards)]) == 2
    captured = capsys.readouterr()
    assert "nothing written: give at least one of --json, --csv, --report and --plots" in captured.err
    assert "merged" not in captured.out


def test_a_folder_for_a_file_output_is_a_usage_error(shards, tmp_path, capsys) -> None:
    for raw in (str(tmp_path / "out") + "/", str(tmp_path)):
        with pytest.raises(SystemExit) as caught:
            main(["merge", *map(str, shards), "--csv", raw])
        assert caught.value.code == 2
        assert "is a folder, and a file path is needed" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_separate_outputs_are_all_written(shards, tmp_path, capsys) -> None:
    assert (
        main(["merge", *map(str, shards), "--json", str(tmp_path / "all.json"), "--csv", str(tmp_path / "all.csv")])
        == 0
    )
    assert "merged 2 case(s) from 2 run(s)" in capsys.readouterr().out
    assert (tmp_path / "all.json").exists() and (tmp_path / "all.csv").exists()
