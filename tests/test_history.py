"""The run history: every run that measured a case is kept in a numbered folder; ``compare`` names runs from it;
a run that measured nothing replaces nothing and says why."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_specbench.cli import main
from pytest_specbench.results import history

#: a real result row (the default CPU run's first)
TEMPLATE = json.loads((Path(__file__).resolve().parents[1] / "docs" / "default_run.json").read_text())


def _document(acceptance: float) -> dict:
    row = {**TEMPLATE["results"][0], "acceptance_rate": acceptance}
    return {key: TEMPLATE[key] for key in ("fingerprint", "versions", "options")} | {"results": [row]}


@pytest.fixture
def offline_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An empty Hugging Face cache and no hub: the built-in GPT-2 pairs are unavailable, quickly."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# --- the folder ---------------------------------------------------------------------------------------


def test_runs_are_numbered_in_order_and_found_by_number(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    first, second = history.new_entry(runs, "abc1234"), history.new_entry(runs, "nogit")
    assert re.fullmatch(r"0001-\d{8}T\d{6}Z-abc1234", first.name)
    assert re.fullmatch(r"0002-\d{8}T\d{6}Z-nogit", second.name)
    (runs / "notes").mkdir()  # not a run folder: left out
    for entry in (first, second):
        (entry / history.JSON).write_text("{}")
    assert history.entries(runs) == [first, second]
    assert history.find_run(runs, "1") == history.find_run(runs, "0001") == first / history.JSON
    assert history.last_runs(runs) == [first / history.JSON, second / history.JSON]
    with pytest.raises(history.HistoryError, match=r"no run 0007 in the history .* \(its latest runs: 0001, 0002\)"):
        history.find_run(runs, "0007")
    assert history.new_entry(runs, "nogit").name.startswith("0003-")


def test_numbers_only_grow_when_the_latest_run_folder_is_deleted(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    entries = [history.new_entry(runs, "nogit") for _ in range(3)]
    entries[2].rmdir()  # the latest run deleted by hand: its number is not given again
    assert history.number_of(history.new_entry(runs, "nogit")) == 4
    (runs / history.COUNTER).unlink()  # a history of an older version, without the counter: the folders count
    (runs / "0009-20260101T000000Z-nogit").mkdir()
    assert history.number_of(history.new_entry(runs, "nogit")) == 10


def test_a_history_that_cannot_be_made_is_named_and_nothing_is_created(tmp_path: Path) -> None:
    assert history.unusable_reason(tmp_path / "a" / "runs") is None
    assert not (tmp_path / "a").exists()  # created by the first run that measured a case, not by the check
    (tmp_path / "blocker").write_text("")
    assert history.unusable_reason(tmp_path / "blocker" / "runs") == f"{tmp_path / 'blocker'} is a file"


@pytest.mark.slow  # runs git
def test_the_commit_is_the_checkouts_or_nogit(tmp_path: Path) -> None:
    assert (
        re.fullmatch(r"[0-9a-f]{4,40}", history.short_commit(Path(__file__).parent))
        or history.short_commit(Path(__file__).parent) == "nogit"
    )
    assert history.short_commit(tmp_path) == "nogit"


def test_compare_takes_the_last_two_runs_or_run_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / ".specbench" / "runs"
    entries = [history.new_entry(runs, "nogit") for _ in range(3)]
    for entry, acceptance in zip(entries, (0.5, 0.6, 0.7)):
        (entry / history.JSON).write_text(json.dumps(_document(acceptance)))

    assert main(["compare", "--last"]) == 0
    out = capsys.readouterr().out
    assert f"old: {Path('.specbench/runs') / entries[1].name / history.JSON}" in out
    assert f"new: {Path('.specbench/runs') / entries[2].name / history.JSON}" in out
    assert "0.600" in out and "0.700" in out and "+0.100" in out

    assert main(["compare", "0001", "3"]) == 0
    out = capsys.readouterr().out
    assert entries[0].name in out and entries[2].name in out and "+0.200" in out

    assert main(["compare", str(entries[0]), str(entries[1] / history.JSON)]) == 0  # a folder, a file
    assert "+0.100" in capsys.readouterr().out

    # A damaged latest run: --last compares the two latest readable ones and says which it skipped and why.
    (entries[2] / history.JSON).write_text("{not json")
    assert main(["compare", "--last"]) == 0
    out = capsys.readouterr().out
    damaged = Path(".specbench/runs") / entries[2].name / history.JSON
    assert f"skipped 0003: {damaged}: not a readable specbench JSON" in out
    assert "name two runs by number to choose others" in out and "+0.100" in out
    assert entries[0].name in out and entries[1].name in out
    (entries[1] / history.JSON).write_text("[]")
    assert main(["compare", "--last"]) == 2
    assert "fewer than 2 readable runs" in capsys.readouterr().err
    (entries[1] / history.JSON).write_text(json.dumps(_document(0.6)))

    assert main(["compare", "0001", "0009"]) == 2
    assert "no run 0009 in the history" in capsys.readouterr().err
    assert main(["compare", "--last", "--history", str(tmp_path / "none")]) == 2
    assert "holds 0 run(s) with a JSON, fewer than 2" in capsys.readouterr().err


# --- through pytest -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_every_run_is_kept_in_the_history_and_spec_results_are_the_latest(
    bench, pytester: pytest.Pytester, capsys: pytest.CaptureFixture
) -> None:
    bench("-k", "k1").assert_outcomes(passed=2, deselected=2)
    result = bench("-k", "k4", "--specbench-report=report.md", "--specbench-plots=figures")
    result.assert_outcomes(passed=2, deselected=2)
    runs = history.entries(pytester.path / ".specbench" / "runs")
    assert [entry.name[:5] for entry in runs] == ["0001-", "0002-"]
    result.stdout.fnmatch_lines([f"*run saved in the history: .specbench/runs/{runs[1].name}*"])
    first = json.loads((runs[0] / history.JSON).read_text())
    assert [row["case"] for row in first["results"]] == ["tiny-k1-natural", "tiny-k1-code_json"]
    latest = json.loads((pytester.path / "spec_results.json").read_text())
    assert json.loads((runs[1] / history.JSON).read_text()) == latest
    assert latest["history_entry"] == str(Path(".specbench/runs") / runs[1].name)
    for name in (history.CSV, history.LOG):  # the latest run's copies
        assert (runs[1] / name).read_text() == (pytester.path / name).read_text()
    assert (runs[1] / history.REPORT).exists() and not (runs[0] / history.REPORT).exists()
    figures = sorted(path.name for path in (pytester.path / "figures").glob("*.png"))
    assert figures and sorted(path.name for path in (runs[1] / history.FIGURES).iterdir()) == figures
    assert "figures/" in (runs[1] / history.REPORT).read_text()  # the report links the run's own copies
    assert [json.loads(line).get("case") for line in (runs[0] / history.LOG).read_text().splitlines()[1:-1]] == [
        "tiny-k1-natural",
        "tiny-k1-code_json",
    ]

    capsys.readouterr()
    assert main(["compare", "--last"]) == 0
    out = capsys.readouterr().out
    assert runs[0].name in out and runs[1].name in out

    bench("-k", "k1", "--specbench-history=").assert_outcomes(passed=2, deselected=2)
    assert len(history.entries(pytester.path / ".specbench" / "runs")) == 2


@pytest.mark.slow
def test_the_compare_hint_names_a_history_folder_that_is_not_the_default(
    bench, pytester: pytest.Pytester, capsys: pytest.CaptureFixture
) -> None:
    for _ in range(2):
        result = bench("-k", "k1 and natural", "--specbench-history=other runs")
        result.assert_outcomes(passed=1, deselected=3)
    hint = "(compare it with the run before: python -m pytest_specbench compare --history 'other runs' --last)"
    assert hint in result.stdout.str()
    capsys.readouterr()
    assert main(["compare", "--history", "other runs", "--last"]) == 0  # the hint, as the shell passes it
    assert "0001-" in capsys.readouterr().out


@pytest.mark.slow
def test_a_resume_that_measured_nothing_adds_no_run_to_the_history(bench, pytester: pytest.Pytester) -> None:
    bench("-k", "k1").assert_outcomes(passed=2, deselected=2)
    bench("-k", "k4").assert_outcomes(passed=2, deselected=2)
    result = bench("-k", "k4", "--specbench-resume=spec_results.jsonl")  # every case replayed, none measured
    result.assert_outcomes(passed=2, deselected=2)
    result.stdout.fnmatch_lines(
        ["*not saved in the history: every result was taken from spec_results.jsonl, none was measured*"]
    )
    assert "run saved in the history" not in result.stdout.str()
    assert len(history.entries(pytester.path / ".specbench" / "runs")) == 2
    # compare --last still sets the two runs that measured something against each other
    old, new = history.last_runs(pytester.path / ".specbench" / "runs")
    assert [row["case"] for row in json.loads(old.read_text())["results"]] == ["tiny-k1-natural", "tiny-k1-code_json"]


#: the documented selection of one GPT-2 case, as a machine without GPT-2's weights runs it (float32 alone)
GPT2_DISTIL_K8 = ("-k", "gpt2_distil and k8", "-p", "no:randomly", "--benchmark-disable", "--specbench-dtype=float32")


@pytest.mark.slow
def test_a_run_that_measured_nothing_replaces_nothing_and_says_why(
    bench, pytester: pytest.Pytester, offline_hub
) -> None:
    bench("-k", "k1 and natural").assert_outcomes(passed=1, deselected=3)
    names = ("spec_results.csv", "spec_results.json", "spec_results.jsonl")
    before = {name: (pytester.path / name).read_bytes() for name in names}

    # The documented selection on a machine without GPT-2's weights: no option, no -rs.
    result = bench(
        *GPT2_DISTIL_K8,
        defaults=False,
    )
    result.assert_outcomes(skipped=4)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*specbench summary*",
            "no specbench case ran: all 4 selected case(s) were skipped",
            "gpt2_distil: 4 case(s) skipped: model 'gpt2' is not in the local Hugging Face cache*"
            "fetch it with: hf download gpt2",
            "no file was written: the results files and log of an earlier run are left as they were",
        ]
    )
    assert "results written" not in result.stdout.str()
    assert {name: (pytester.path / name).read_bytes() for name in names} == before
    assert len(history.entries(pytester.path / ".specbench" / "runs")) == 1


@pytest.mark.slow
def test_a_pair_skipped_whole_beside_one_that_ran_is_named_with_its_reason(
    bench, tiny_pairs_file: Path, offline_hub
) -> None:
    result = bench(
        f"--specbench-pairs-file={tiny_pairs_file}",
        "--specbench-k=1",
        "--specbench-prompts=natural",
        "--specbench-max-new-tokens=12",
        "--specbench-warmup=0",
        "--specbench-min-rounds=1",
        "--specbench-max-rounds=1",
        "-k",
        "tiny or gpt2_distil",
        "-p",
        "no:randomly",
        "--benchmark-disable",
        "--specbench-dtype=float32",
        defaults=False,
    )
    result.assert_outcomes(passed=1, skipped=1)  # gpt2_tiny, which -k "tiny" would take, is not in a CPU's default
    result.stdout.fnmatch_lines(
        [
            "*specbench summary*",
            "gpt2_distil: 1 case(s) skipped: model 'gpt2' is not in the local Hugging Face "
            "cache*fetch it with: hf download gpt2",
        ]
    )


@pytest.mark.slow
def test_a_run_then_one_of_nothing_runnable_then_the_first_ones_resume_lose_nothing(
    bench, pytester: pytest.Pytester, offline_hub, capsys: pytest.CaptureFixture
) -> None:
    bench().assert_outcomes(passed=4)  # the main job
    first_csv = (pytester.path / "spec_results.csv").read_text()
    bench(
        *GPT2_DISTIL_K8,
        defaults=False,
    ).assert_outcomes(skipped=4)
    result = bench("--specbench-resume=spec_results.jsonl")  # the first run's resume command
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*4 case(s) taken from spec_results.jsonl, not run again*"])
    assert (pytester.path / "spec_results.csv").read_text() == first_csv

    # The resume measured nothing: no second run in the history for compare --last to set against the first.
    result.stdout.fnmatch_lines(["*not saved in the history: every result was taken from spec_results.jsonl*"])
    runs = history.entries(pytester.path / ".specbench" / "runs")
    assert len(runs) == 1 and (runs[0] / history.CSV).read_text() == first_csv
    capsys.readouterr()
    assert main(["compare", "--last"]) == 2
    assert "holds 1 run(s) with a JSON, fewer than 2" in capsys.readouterr().err
