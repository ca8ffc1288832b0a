"""pytest-xdist runs and baseline gating, through pytester on tiny pairs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiny_pairs import write_tiny_pair

BENCH_MODULE = Path(__file__).resolve().parents[1] / "bench_cases" / "test_speculative.py"
COMPARED = ("case", "pair", "k", "prompt", "verdict", "lossless", "acceptance_rate", "tau", "new_tokens",
            "accepted_per_step")


@pytest.fixture(scope="module")
def pairs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pairs")
    write_tiny_pair(root / "good", name="tiny", noise=0.01)
    write_tiny_pair(root / "weak", name="tiny", noise=0.2)  # same pair id, a much worse draft
    return root


@pytest.fixture
def bench(pytester: pytest.Pytester, pairs_dir: Path):
    pytester.makepyfile(test_speculative=BENCH_MODULE.read_text(encoding="utf-8"))

    def run(*args: str, draft: str = "good") -> pytest.RunResult:
        return pytester.runpytest(
            f"--specbench-pairs-file={pairs_dir / draft / 'pairs.toml'}", "--specbench-pairs=tiny",
            "--specbench-prompts=natural,code_json,dialogue", "--specbench-k=1,4",
            "--specbench-max-new-tokens=12", "--specbench-warmup=0", "--specbench-repeats=1",
            "-p", "no:cacheprovider", *args,
        )

    return run


def _rows(path: Path) -> list[dict]:
    return json.loads(path.read_text())["results"]


def test_xdist_gives_the_same_cases_and_verdicts(bench, pytester: pytest.Pytester) -> None:
    runs = {}
    for name, args in (("serial", ()), ("n0", ("-n", "0")), ("n2", ("-n", "2"))):
        result = bench(f"--specbench-json={name}.json", f"--specbench-csv={name}.csv", *args)
        result.assert_outcomes(passed=6)
        assert result.stdout.str().count("specbench summary") == 1
        runs[name] = sorted(({key: row[key] for key in COMPARED} for row in _rows(pytester.path / f"{name}.json")),
                            key=lambda row: row["case"])
        assert len(runs[name]) == 6
    assert runs["serial"] == runs["n0"] == runs["n2"]
    # The CSVs hold the same cases too (timings aside).
    cases = {name: sorted(line.split(",")[5] for line in (pytester.path / f"{name}.csv").read_text().splitlines()[1:])
             for name in runs}
    assert cases["serial"] == cases["n2"]


def test_xdist_groups_a_pair_on_one_worker_that_loads_each_model_once(bench, pytester: pytest.Pytester) -> None:
    result = bench("-n", "2", "--specbench-json=out.json")
    result.assert_outcomes(passed=6)
    rows = _rows(pytester.path / "out.json")
    assert {row["worker"] for row in rows} <= {"gw0", "gw1"}
    assert len({row["worker"] for row in rows}) == 1  # loadgroup: one pair, one worker
    for row in rows:
        assert set(row["model_loads"].values()) == {1}, row["model_loads"]


def test_unchanged_run_passes_the_gate(bench, pytester: pytest.Pytester) -> None:
    bench("--specbench-save-baseline=baseline.json").assert_outcomes(passed=6)
    saved = json.loads((pytester.path / "baseline.json").read_text())
    assert len(saved["cases"]) == 6 and saved["versions"]["torch"]
    result = bench("--specbench-baseline=baseline.json", "-n", "2")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*specbench gate*", "*compared 6 case(s)*no regression*"])


def test_weakened_draft_fails_the_gate_with_a_regression_list(bench, pytester: pytest.Pytester) -> None:
    bench("--specbench-save-baseline=baseline.json").assert_outcomes(passed=6)
    result = bench("--specbench-baseline=baseline.json", draft="weak")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=6)  # every case is still lossless; only acceptance fell
    result.stdout.fnmatch_lines(["*specbench gate*", "*regression*", "*tiny-k*acceptance*"])


def test_baseline_with_extra_cases_fails_unless_missing_allowed(bench, pytester: pytest.Pytester) -> None:
    bench("--specbench-save-baseline=baseline.json").assert_outcomes(passed=6)
    result = bench("--specbench-baseline=baseline.json", "-k", "k1")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*tiny-k4-*missing*"])
    result = bench("--specbench-baseline=baseline.json", "-k", "k1", "--specbench-allow-missing")
    assert result.ret == pytest.ExitCode.OK


def test_malformed_baseline_is_a_usage_error_naming_the_file(bench, pytester: pytest.Pytester) -> None:
    (pytester.path / "broken.json").write_text("{not json")
    result = bench("--specbench-baseline=broken.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pytest-specbench:*broken.json*"])


def test_a_crashed_worker_loses_only_its_unfinished_case(bench, pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import os

        def pytest_runtest_call(item):
            if "tiny-k4-dialogue" in item.nodeid:
                os._exit(1)  # the worker dies mid-case
    """)
    result = bench("-n", "2", "--specbench-json=out.json")
    result.assert_outcomes(passed=5, failed=1)
    document = json.loads((pytester.path / "out.json").read_text())
    assert len(document["results"]) == 5
    assert document["missing_cases"] == ["tiny-k4-dialogue"]
    result.stdout.fnmatch_lines(["*specbench summary*", "*no result for 1 case(s): tiny-k4-dialogue*"])
