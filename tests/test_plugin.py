"""The plugin end to end, through pytester, on the tiny pair (the ``bench`` fixture of conftest.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

# --- options and their errors -------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("--specbench-k=0", "--specbench-k='0': 0 is too small; accepted: an integer >= 1"),
        ("--specbench-k=2,x", "'x' is not a whole number"),
        ("--specbench-dtype=fp8", "accepted: float32, float16, bfloat16"),
        ("--specbench-max-new-tokens=-3", "--specbench-max-new-tokens"),
        ("--specbench-gpu=tpu", "accepted: cpu, cuda, cuda:N, mps"),
        ("--specbench-gpu=cuda:0", "CUDA is not available"),
        ("--specbench-pairs=nope", "unknown pair(s) nope"),
        ("--specbench-pairs=", "--specbench-pairs='': no value given; accepted: a comma list of pair ids"),
        ("--specbench-prompts=", "--specbench-prompts='': no value given"),
        ("--specbench-prompts=nope", "nope"),
        ("--specbench-prompt-file=missing.jsonl", "no such file"),
        ("--specbench-tie-tolerance=-1", "accepted: a number >= 0"),
        ("--specbench-engine=sglang", "unknown engine 'sglang'; accepted: native, hf, vllm"),
        ("--specbench-vllm-python=no/such/python", "no/such/python is not an executable file"),
        ("--specbench-kernels=fast", "unknown kernel setting 'fast'; accepted: auto, rows, column, linear"),
        # the option's earlier name still parses, and its errors name it
        ("--specbench-head-kernel=fast", "--specbench-head-kernel='fast': unknown kernel setting 'fast'"),
        ("--specbench-k=2,fast", "'fast' is not a whole number*auto and heuristic"),
        ("--specbench-top-p=0", "'0' is outside (0, 1]"),
        ("--specbench-top-p=1.5", "accepted: a number in (0, 1]"),
        ("--specbench-temperature=-0.5", "accepted: a number >= 0"),
        ("--specbench-temperature=inf", "accepted: a finite number >= 0"),
        ("--specbench-top-k=-1", "accepted: an integer >= 0"),
        ("--specbench-sampling-check-draws=10", "accepted: an integer >= 100"),
    ],
)
def test_bad_option_is_a_usage_error_before_any_test(bench, option: str, expected: str) -> None:
    if option == "--specbench-gpu=cuda:0":
        torch = pytest.importorskip("torch")
        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
    result = bench(option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*pytest-specbench:*{expected}*"])
    assert "Traceback" not in result.stderr.str()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ("--specbench-csv=blocker/out.csv",),
            "--specbench-csv=blocker/out.csv: its folder cannot be created, since blocker is a file",
        ),
        (
            ("--specbench-csv=same.out", "--specbench-json=same.out"),
            "--specbench-csv and --specbench-json name the same file, */same.out, and one would overwrite the other",
        ),
    ],
    ids=["under-a-file", "one-file-twice"],
)
def test_an_output_that_cannot_be_written_is_a_usage_error_before_any_test(
    bench, pytester: pytest.Pytester, args: tuple[str, ...], expected: str
) -> None:
    (pytester.path / "blocker").write_text("a file, not a folder")
    result = bench(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*pytest-specbench: {expected}*"])
    assert "collected" not in result.stdout.str()


def test_ini_value_is_validated_and_named(bench, pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nspecbench_k = 1,0\n")
    result = bench(defaults=False)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini specbench_k='1,0'*integer >= 1*"])


def test_command_line_wins_over_ini(bench, pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nspecbench_k = 2,3\n")
    result = bench("--collect-only", "-q")
    result.stdout.fnmatch_lines(["*tiny-k1-natural*", "*tiny-k4-natural*"])
    assert "k2" not in result.stdout.str()


def test_ini_value_is_used(bench, pytester: pytest.Pytester, tiny_pairs_file: Path) -> None:
    pytester.makeini(
        f"[pytest]\nspecbench_k = 2,3\nspecbench_pairs = tiny\nspecbench_pairs_file = {tiny_pairs_file}\n"
        "specbench_prompts = natural\n"
    )
    result = bench("--collect-only", "-q", defaults=False)
    result.stdout.fnmatch_lines(["*tiny-k2-natural*", "*tiny-k3-natural*"])
    assert result.ret == pytest.ExitCode.OK


# --- case matrix, ids, selection ----------------------------------------------------------


def test_ids_follow_pair_k_prompt_in_a_fixed_order(bench) -> None:
    result = bench("--collect-only", "-q")
    ids = [line.split("[")[1].rstrip("]") for line in result.stdout.lines if "::test_speculative_decoding[" in line]
    assert ids == ["tiny-k1-natural", "tiny-k4-natural", "tiny-k1-code_json", "tiny-k4-code_json"]
    # Collecting runs nothing: no summary claims that nothing matched or that results are missing.
    assert "specbench summary" not in result.stdout.str() and "no result for" not in result.stdout.str()


@pytest.mark.slow
def test_dash_k_selects_exactly_the_matching_cases(bench) -> None:
    result = bench("-k", "tiny and k4")
    result.assert_outcomes(passed=2, deselected=2)
    result = bench("-k", "tiny and k4", "-v")
    result.stdout.fnmatch_lines(["*tiny-k4-natural? PASSED*", "*tiny-k4-code_json? PASSED*"])


def test_marker_selects_by_keyword_arguments(bench) -> None:
    result = bench("--collect-only", "-q", "-m", "specbench(k=4, prompt='code_json')")
    selected = [line for line in result.stdout.lines if "::test_speculative_decoding[" in line]
    assert selected == [line for line in selected if "tiny-k4-code_json" in line] and len(selected) == 1


@pytest.mark.slow
def test_user_module_can_use_the_same_fixtures(bench, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_mine="""
        def test_mine(spec_case, specbench, specbench_config):
            result = specbench.run(spec_case)
            assert result.k == spec_case.k  # a typed CaseResult: the CSV's columns are its attributes
            assert specbench_config.max_new_tokens == 12
            assert result.new_tokens == 12
    """
    )
    result = bench("test_mine.py")
    result.assert_outcomes(passed=4)


# --- fixtures: models loaded once --------------------------------------------------------------


@pytest.mark.slow
def test_each_model_is_loaded_once_per_session(bench, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_zz_loads="""
        def test_loads(specbench_store):
            counts = dict(specbench_store.load_counts)
            assert sorted(counts.values()) == [1, 1], counts
            assert len(counts) == 2
    """
    )
    result = bench("--specbench-k=1,2,4")
    result.assert_outcomes(passed=7)


# --- the summary, CSV and JSON ----------------------------------------------------------------


@pytest.mark.slow
def test_summary_table_csv_and_json_agree(bench, pytester: pytest.Pytester) -> None:
    result = bench("--specbench-csv=out/results.csv", "--specbench-json=out/results.json")
    result.assert_outcomes(passed=4)
    out = result.stdout.str()
    assert out.count("specbench summary") == 1
    result.stdout.fnmatch_lines(["*tiny: target*", "*prompt*k*base tok/s*spec tok/s*speedup*accept*tau*lossless*"])

    with open(pytester.path / "out/results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["case"] for row in rows] == [
        "tiny-k1-natural",
        "tiny-k4-natural",
        "tiny-k1-code_json",
        "tiny-k4-code_json",
    ]
    for column in (
        "config",
        "latency_ms",
        "throughput_tps",
        "acceptance_rate",
        "quality_score",
        "pair",
        "target",
        "draft",
        "k",
        "prompt",
        "baseline_tps",
        "speculative_tps",
        "speedup",
        "tau",
        "new_tokens",
        "device",
        "dtype",
        "lossless",
    ):
        assert column in rows[0], column
    assert all(row["lossless"] == "True" and row["quality_score"] == "1.0" for row in rows)
    assert all(row["new_tokens"] == "12" and row["device"] == "cpu" for row in rows)

    document = json.loads((pytester.path / "out/results.json").read_text())
    assert {"fingerprint", "versions", "options", "results"} <= set(document)
    assert document["versions"]["torch"]
    assert document["options"]["specbench_k"] == "1,4"
    by_case = {row["case"]: row for row in document["results"]}
    for row in rows:
        assert float(row["acceptance_rate"]) == pytest.approx(by_case[row["case"]]["acceptance_rate"])
        assert float(row["speedup"]) == pytest.approx(by_case[row["case"]]["speedup"])
        # the table shows the same acceptance (3 decimals) for that case
        line = next(line for line in result.stdout.lines if line.split()[:2] == [row["prompt"], row["k"]])
        assert f"{float(row['acceptance_rate']):.3f}" in line


def test_no_case_ran_is_said_plainly(bench) -> None:
    result = bench("-k", "no_such_case")
    result.stdout.fnmatch_lines(["*specbench summary*", "*no specbench case matched the selection*"])


@pytest.mark.slow
def test_files_are_not_written_when_disabled(bench, pytester: pytest.Pytester) -> None:
    result = bench("--specbench-csv=", "--specbench-json=", "-k", "k1 and natural")
    result.assert_outcomes(passed=1, deselected=3)
    assert not list(pytester.path.glob("*.csv")) and not list(pytester.path.glob("*.json"))


# --- a broken engine fails the case, readably ---------------------------------------------------------


@pytest.mark.slow
def test_broken_engine_fails_with_the_divergence_explained(bench, pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import pytest
        import pytest_specbench.engine.decoding as decoding

        @pytest.fixture(autouse=True)
        def broken_engine(monkeypatch):
            original = decoding._verify

            def broken_verify(target, cache, block, proposal):
                accepted, target_tokens = original(target, cache, block, proposal)
                corrupted = target_tokens.clone()
                corrupted[accepted] = (corrupted[accepted] + 1) % 256  # commit one wrong token
                return accepted, corrupted

            monkeypatch.setattr(decoding, "_verify", broken_verify)
    """)
    result = bench("-k", "k4 and natural")
    result.assert_outcomes(failed=1, deselected=3)
    result.stdout.fnmatch_lines(
        [
            "*tiny-k4-natural: speculative output differs from the target's greedy output at new token *",
            "*expected:*(target greedy)*",
            "*got:*(speculative)*",
            "*target top-2 logit margin there:*",
        ]
    )
    result.stdout.fnmatch_lines(["*0 lossless, 0 tie-divergence, 1 diverged*"])


# --- pytest-benchmark on and off --------------------------------------------------------------


@pytest.mark.slow
def test_pytest_benchmark_times_the_speculative_run(bench, pytester: pytest.Pytester) -> None:
    result = bench("--benchmark-json=bench.json", "-k", "k4")
    result.assert_outcomes(passed=2, deselected=2)
    document = json.loads((pytester.path / "bench.json").read_text())
    assert len(document["benchmarks"]) == 2
    for entry in document["benchmarks"]:
        assert entry["stats"]["rounds"] == 1
        assert 0.0 <= entry["extra_info"]["acceptance_rate"] <= 1.0
        assert entry["extra_info"]["k"] == 4
    result.stdout.fnmatch_lines(["*specbench summary*"])


@pytest.mark.slow
def test_own_timing_works_with_pytest_benchmark_disabled(bench, pytester: pytest.Pytester) -> None:
    result = bench(
        "--benchmark-disable", "--specbench-min-rounds=2", "--specbench-max-rounds=2", "-k", "k1 and natural"
    )
    result.assert_outcomes(passed=1, deselected=3)
    row = json.loads((pytester.path / "spec_results.json").read_text())["results"][0]
    assert row["rounds"] == 2 and row["baseline_runs"] == 2
    assert row["baseline_tps"] > 0 and row["speculative_tps"] > 0


@pytest.mark.slow
def test_baseline_once_times_the_baseline_once_per_prompt(bench, pytester: pytest.Pytester) -> None:
    result = bench(
        "--specbench-baseline-once", "--specbench-min-rounds=2", "--specbench-max-rounds=2", "--specbench-k=1,2,4"
    )
    result.assert_outcomes(passed=6)
    rows = json.loads((pytester.path / "spec_results.json").read_text())["results"]
    natural = [row for row in rows if row["prompt"] == "natural"]
    assert len({row["baseline_tps"] for row in natural}) == 1


@pytest.mark.slow
def test_context_tokens_pad_every_prompt_to_the_same_length(bench, pytester: pytest.Pytester) -> None:
    result = bench("--specbench-context-tokens=300", "-k", "k1")
    result.assert_outcomes(passed=2, deselected=2)
    rows = json.loads((pytester.path / "spec_results.json").read_text())["results"]
    assert [row["prompt_tokens"] for row in rows] == [300, 300]
    assert all(row["lossless"] for row in rows)
