"""SpecbenchSession through the plugin: a pair the user chose must run; only unrequested built-in pairs skip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

HUB_OFFLINE = (
    "model 'gpt2' is not in the local Hugging Face cache and the hub is unreachable (HF_HUB_OFFLINE=1); "
    "fetch it with: hf download gpt2"
)


@pytest.fixture
def missing_models_pairs_file(tmp_path: Path) -> Path:
    """A pairs file declaring ``t3``, whose target folder does not exist (a typo)."""
    path = tmp_path / "pairs.toml"
    path.write_text('[pairs.t3]\ntarget = "./modles/target"\ndraft = "./models/draft"\n')
    return path


@pytest.fixture
def offline_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An empty Hugging Face cache and no hub: the built-in GPT-2 pairs are unavailable, quickly."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_a_named_pair_whose_model_is_missing_fails_and_leaves_no_stale_file(
    bench, pytester: pytest.Pytester, missing_models_pairs_file: Path
) -> None:
    (pytester.path / "out.csv").write_text("a stale row from an earlier run\n")
    result = bench(
        "--specbench-pairs=t3",
        "--specbench-csv=out.csv",
        "--specbench-save-baseline=b.json",
        pairs_file=missing_models_pairs_file,
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines(
        [
            f"*t3: model '*modles/target' does not exist (no such file or directory) (the pair is declared in "
            f"{missing_models_pairs_file})*",
            "*did not save the baseline b.json: 4 case(s) have no result*",
        ]
    )
    assert (pytester.path / "out.csv").read_text().splitlines()[0].startswith("config,")
    assert len((pytester.path / "out.csv").read_text().splitlines()) == 1  # the header: no case finished
    document = json.loads((pytester.path / "spec_results.json").read_text())
    assert document["results"] == [] and len(document["missing_cases"]) == 4
    assert not (pytester.path / "b.json").exists()


def test_a_declared_pair_whose_model_is_missing_fails_though_not_named(bench, missing_models_pairs_file: Path) -> None:
    result = bench(
        f"--specbench-pairs-file={missing_models_pairs_file}",
        "--specbench-k=1",
        "--specbench-prompts=natural",
        "--specbench-dtype=float32",
        "-k",
        "t3",
        "-p",
        "no:randomly",
        "--benchmark-disable",
        defaults=False,
    )
    result.assert_outcomes(failed=1, deselected=3)  # the CPU default's three built-in pairs are not selected
    result.stdout.fnmatch_lines(["*t3: model '*modles/target' does not exist*"])


def test_a_declared_pair_naming_no_embedded_model_fails_with_the_names_accepted(
    bench, pytester: pytest.Pytester
) -> None:
    pairs = pytester.path / "unknown_embedded.toml"
    pairs.write_text('[pairs.e9]\ntarget = "embedded:gemma9"\ndrafter = "prompt_lookup"\n')
    result = bench("--specbench-pairs=e9", "--specbench-k=1", "--specbench-dtype=float32", pairs_file=pairs)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*e9: model 'embedded:gemma9' is not an embedded model; available: embedded:gemma3-270m, *"]
    )
    result.stdout.no_fnmatch_line("*Traceback*")


@pytest.mark.slow
def test_an_unrequested_built_in_pair_is_skipped_and_a_named_one_fails(bench, offline_hub) -> None:
    common = (
        "--specbench-k=1",
        "--specbench-prompts=natural",
        "-p",
        "no:randomly",
        "--benchmark-disable",
        "--specbench-dtype=float32",
    )
    result = bench(*common, "-k", "gpt2_distil", "-rs", defaults=False)
    result.assert_outcomes(skipped=1, deselected=2)  # the CPU default's two embedded pairs
    result.stdout.fnmatch_lines([f"*gpt2_distil: {HUB_OFFLINE}*"])
    assert result.ret == pytest.ExitCode.OK

    result = bench(*common, "--specbench-pairs=gpt2_distil", defaults=False)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*gpt2_distil: {HUB_OFFLINE}*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
