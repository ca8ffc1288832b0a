"""pytest-xdist runs of the benchmark module, through pytester on the tiny pair: same results, one worker per
block."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # xdist workers: processes of their own, each loading the pair

COMPARED = (
    "case",
    "pair",
    "k",
    "prompt",
    "verdict",
    "lossless",
    "acceptance_rate",
    "tau",
    "new_tokens",
    "accepted_per_step",
)


def _rows(path: Path) -> list[dict]:
    return json.loads(path.read_text())["results"]


def test_xdist_gives_the_same_cases_and_verdicts(six_case_bench, pytester: pytest.Pytester) -> None:
    runs = {}
    # The model's own kernels: under auto each process picks its forms by timing them, which a busy machine
    # sways, and forms round the last bits differently, enough to flip a random tiny model's near-tie.
    for name, args in (("serial", ()), ("n0", ("-n", "0")), ("n2", ("-n", "2"))):
        result = six_case_bench(
            f"--specbench-json={name}.json", f"--specbench-csv={name}.csv", "--specbench-kernels=linear", *args
        )
        result.assert_outcomes(passed=6)
        assert result.stdout.str().count("specbench summary") == 1
        runs[name] = sorted(
            ({key: row[key] for key in COMPARED} for row in _rows(pytester.path / f"{name}.json")),
            key=lambda row: row["case"],
        )
        assert len(runs[name]) == 6
    assert runs["serial"] == runs["n0"] == runs["n2"]
    # The CSVs hold the same cases too (timings aside).
    cases = {
        name: sorted(line.split(",")[5] for line in (pytester.path / f"{name}.csv").read_text().splitlines()[1:])
        for name in runs
    }
    assert cases["serial"] == cases["n2"]


def test_xdist_keeps_a_block_on_one_worker_that_loads_each_model_once(
    six_case_bench, pytester: pytest.Pytester
) -> None:
    result = six_case_bench("-n", "2", "--specbench-json=out.json")
    result.assert_outcomes(passed=6)
    rows = _rows(pytester.path / "out.json")
    assert {row["worker"] for row in rows} <= {"gw0", "gw1"}
    workers_of_block: dict[str, set[str]] = {}
    for row in rows:
        workers_of_block.setdefault(row["block"], set()).add(row["worker"])
    assert len(workers_of_block) == 3 and all(len(workers) == 1 for workers in workers_of_block.values())
    # Timed together: the block's cases ran in the same rounds, with one baseline each.
    for block in workers_of_block:
        members = [row for row in rows if row["block"] == block]
        assert len({row["block_round_count"] for row in members}) == 1
    for row in rows:
        assert set(row["model_loads"].values()) == {1}, row["model_loads"]


def test_a_crashed_worker_loses_only_its_unfinished_case(six_case_bench, pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import os

        def pytest_runtest_call(item):
            if "tiny-k4-dialogue" in item.nodeid:
                os._exit(1)  # the worker dies mid-case
    """)
    result = six_case_bench("-n", "2", "--specbench-json=out.json")
    result.assert_outcomes(passed=5, failed=1)
    document = json.loads((pytester.path / "out.json").read_text())
    assert len(document["results"]) == 5
    assert document["missing_cases"] == ["tiny-k4-dialogue"]
    result.stdout.fnmatch_lines(["*specbench summary*", "*no result for 1 case(s): tiny-k4-dialogue*"])
