"""SpecbenchConfig: defaults per device, precedence and validation, without pytest plumbing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_specbench.kernels.native_dtypes import native_dtypes
from pytest_specbench.settings.config import ConfigError, check_files, parse_settings, read_settings


def test_cpu_gets_the_small_defaults_and_gpu_the_seed_matrix() -> None:
    cpu = parse_settings({}, cuda_available=lambda: False)
    assert cpu.dtypes == native_dtypes("cpu")  # float32, beside bfloat16 where this CPU computes it natively
    # The seeds' k sweep on every machine; fewer prompts and fewer tokens on CPU; one budget for the run.
    assert (cpu.ks, cpu.max_new_tokens, cpu.min_rounds, cpu.case_budget) == ((1, 2, 4, 8, 16), 32, 2, None)
    assert (cpu.run_budget, cpu.race) == (900.0, True)
    assert cpu.prompt_categories == ("natural", "code_python", "repetitive", "list_items")
    float32 = {"dtype": ("float32", "--specbench-dtype")}  # auto would probe a GPU this machine may lack
    gpu = parse_settings(float32, cuda_available=lambda: True)
    assert (gpu.ks, gpu.max_new_tokens, gpu.min_rounds, gpu.case_budget, gpu.run_budget) == (
        (1, 2, 4, 8, 16),
        128,
        3,
        None,
        900.0,
    )
    assert gpu.prompt_categories == ()  # all
    # an explicit cuda device means the GPU defaults, whatever this machine has
    assert parse_settings({**float32, "gpu": ("cuda:1", "--specbench-gpu")}).max_new_tokens == 128
    assert parse_settings({"gpu": ("cpu", "--specbench-gpu")}, cuda_available=lambda: True).max_new_tokens == 32


def test_min_rounds_above_max_rounds_is_refused() -> None:
    with pytest.raises(ConfigError, match="min-rounds=5 is above --specbench-max-rounds=2"):
        parse_settings({"min-rounds": ("5", "--specbench-min-rounds"), "max-rounds": ("2", "--specbench-max-rounds")})


def test_only_given_options_are_marked_given() -> None:
    config = parse_settings({"k": ("8", "--specbench-k")})
    assert config.given == {"k"}


def test_given_values_win_over_cpu_defaults() -> None:
    config = parse_settings({"k": ("8", "--specbench-k"), "max-new-tokens": ("16", "ini specbench_max_new_tokens")})
    assert config.ks == (8,) and config.max_new_tokens == 16
    assert config.raw["specbench_k"] == "8"


def test_command_line_wins_over_ini() -> None:
    cli = {"specbench_k": "4"}
    ini = {"specbench_k": "2", "specbench_dtype": "bfloat16", "specbench_baseline_once": True}
    values = read_settings(lambda dest: cli.get(dest), lambda dest: ini.get(dest))
    assert values["k"] == ("4", "--specbench-k")
    assert values["dtype"] == ("bfloat16", "ini specbench_dtype")
    assert parse_settings(values).baseline_once is True


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("k", "1,1", "listed more than once: 1"),
        ("k", "", "no value given"),
        # An empty list (an unset shell variable) is not "the default".
        ("pairs", "", "no value given; accepted: a comma list of pair ids"),
        ("prompts", " , ", "no value given; accepted: a comma list of prompt categories"),
        ("gpu", "", "no value given; accepted: a comma list of devices"),
        ("threads", "0", "integer >= 1"),
        ("max-acceptance-drop", "x", "not a number"),
        ("gpu", "cuda:x", "unknown device 'cuda:x'"),
        ("baseline", "no/such/file.json", "no such file"),
        ("pairing", "nearby", "unknown pairing 'nearby'; accepted: interleaved, rounds"),
    ],
)
def test_bad_values_name_the_option_and_what_is_accepted(name: str, raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"--specbench-{name}=.*{message}"):
        parse_settings({name: (raw, f"--specbench-{name}")})


@pytest.mark.parametrize("raw", ["0/2", "3/2", "1", "a/b", "1/0"])
def test_a_bad_shard_names_what_is_accepted(raw):
    with pytest.raises(ConfigError, match=r"--specbench-shard.*accepted: e.g. 1/2 and 2/2"):
        parse_settings({"shard": (raw, "--specbench-shard")})


def test_a_shard_and_output_folders_parse():
    settings = parse_settings(
        {
            "shard": ("2/3", "--specbench-shard"),
            "plots": ("figs", "--specbench-plots"),
            "report": ("r.md", "--specbench-report"),
        }
    )
    assert settings.shard == (2, 3) and str(settings.plots_dir) == "figs" and str(settings.report_path) == "r.md"
    assert parse_settings({}).shard is None and parse_settings({}).plots_dir is None


# --- files: the log's default, two options on one file, outputs that cannot be written ----------------


def _files(**given: str):
    return parse_settings(
        {name.replace("_", "-"): (raw, f"--specbench-{name.replace('_', '-')}") for name, raw in given.items()}
    )


def test_the_log_follows_the_csv_or_the_json_and_can_be_turned_off() -> None:
    assert _files().log_path == Path("spec_results.jsonl")
    assert _files(csv="out/run.csv").log_path == Path("out/run.jsonl")
    assert _files(csv="", json="out/run.json").log_path == Path("out/run.jsonl")
    assert _files(csv="", json="").log_path is None
    assert _files(log="").log_path is None
    assert _files(csv="", json="", log="mine.jsonl").log_path == Path("mine.jsonl")


@pytest.mark.parametrize(
    "given",
    [
        {"csv": "same.out", "json": "same.out"},
        {"json": "same.out", "save_baseline": "same.out"},
        {"csv": "same.out", "log": "same.out"},
    ],
)
def test_two_outputs_on_one_file_are_refused(tmp_path: Path, given: dict) -> None:
    config = _files(**{name: str(tmp_path / raw) for name, raw in given.items()})
    names = " and ".join(f"--specbench-{name.replace('_', '-')}" for name in given)
    with pytest.raises(
        ConfigError,
        match=f"{names} name the same file, .*same.out, and one would overwrite the "
        "other; accepted: a separate file for each output",
    ):
        check_files(config)


def test_an_output_may_not_overwrite_an_input_but_log_and_baseline_may_update_their_own(tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.json"
    baseline.write_text("{}")
    log = tmp_path / "run.jsonl"
    log.write_text("")
    with pytest.raises(ConfigError, match="--specbench-csv and --specbench-baseline name the same file"):
        check_files(_files(csv=str(baseline), baseline=str(baseline)))
    check_files(
        _files(
            csv=str(tmp_path / "r.csv"),
            save_baseline=str(baseline),
            baseline=str(baseline),
            log=str(log),
            resume=str(log),
        )
    )


def test_a_missing_output_folder_is_created_and_no_probe_is_left(tmp_path: Path) -> None:
    check_files(_files(csv=str(tmp_path / "a" / "b" / "r.csv"), json="", log=""))
    assert (tmp_path / "a" / "b").is_dir() and not list((tmp_path / "a" / "b").iterdir())


def test_an_output_under_a_regular_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("a file, not a folder")
    with pytest.raises(
        ConfigError,
        match="--specbench-csv=.*blocker/sub/r.csv: its folder cannot be created, since "
        ".*blocker is a file; accepted: a path in a folder this user can create",
    ):
        check_files(_files(csv=str(tmp_path / "blocker" / "sub" / "r.csv")))


def test_an_output_in_a_read_only_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    if os.access(folder, os.W_OK):  # root writes anywhere; sysfs refuses new files even to root
        folder = Path("/sys")
    try:
        with pytest.raises(
            ConfigError,
            match=f"--specbench-json={folder}/r.json: no file can be written in its "
            f"folder {folder} .*or --specbench-json= \\(empty\\) to turn it off",
        ):
            check_files(_files(json=str(folder / "r.json"), csv=""))
    finally:
        (tmp_path / "read-only").chmod(0o755)


def test_baseline_once_records_the_pairing_that_ran_and_refuses_an_explicit_pairing() -> None:
    """--specbench-baseline-once times the baseline apart from the runs and compares unpaired: the
    recorded pairing says so (not the default "interleaved"); a pairing given beside it is refused."""
    from pytest_specbench.settings.config import result_settings, result_settings_from_raw
    from pytest_specbench.settings.options import current_setting_names

    UNPAIRED = "baseline-once"  # the rows' name of the design
    once = parse_settings({"baseline-once": (True, "--specbench-baseline-once")})
    assert once.pairing == UNPAIRED
    assert once.raw["specbench_pairing"] == UNPAIRED
    assert result_settings(once)["--specbench-pairing"] == UNPAIRED
    # A run recorded before: its JSON says interleaved beside baseline-once; it ran unpaired all the same.
    assert (
        result_settings_from_raw({"specbench_baseline_once": True, "specbench_pairing": "interleaved"})[
            "--specbench-pairing"
        ]
        == UNPAIRED
    )
    # A run that recorded the design under its earlier name compares equal.
    assert current_setting_names({"--specbench-pairing": "unpaired"}) == {"--specbench-pairing": UNPAIRED}
    assert parse_settings({}).pairing == "interleaved"
    for pairing in ("interleaved", "rounds"):
        with pytest.raises(
            ConfigError,
            match=f"--specbench-pairing={pairing} and --specbench-baseline-once "
            "contradict each other: .*accepted: one of the two",
        ):
            parse_settings(
                {"baseline-once": (True, "--specbench-baseline-once"), "pairing": (pairing, "--specbench-pairing")}
            )
