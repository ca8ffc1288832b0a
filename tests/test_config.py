"""SpecbenchConfig: defaults per device, precedence and validation, without pytest plumbing."""

from __future__ import annotations

import pytest

from pytest_specbench.config import ConfigError, parse_settings, read_settings


def test_cpu_gets_the_small_defaults_and_gpu_the_seed_matrix() -> None:
    cpu = parse_settings({}, cuda_available=lambda: False)
    # The seeds' k sweep on every machine; fewer prompts, fewer tokens and a shorter budget on CPU.
    assert (cpu.ks, cpu.max_new_tokens, cpu.min_rounds, cpu.case_budget) == ((1, 2, 4, 8, 16), 32, 3, 20.0)
    assert cpu.prompt_categories == ("natural", "code_python", "repetitive", "list_items")
    gpu = parse_settings({}, cuda_available=lambda: True)
    assert (gpu.ks, gpu.max_new_tokens, gpu.min_rounds, gpu.case_budget) == ((1, 2, 4, 8, 16), 128, 3, 30.0)
    assert gpu.prompt_categories == ()  # all
    # an explicit cuda device means the GPU defaults, whatever this machine has
    assert parse_settings({"gpu": ("cuda:1", "--specbench-gpu")}).max_new_tokens == 128
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
    settings = parse_settings({"shard": ("2/3", "--specbench-shard"), "plots": ("figs", "--specbench-plots"),
                               "report": ("r.md", "--specbench-report")})
    assert settings.shard == (2, 3) and str(settings.plots_dir) == "figs" and str(settings.report_path) == "r.md"
    assert parse_settings({}).shard is None and parse_settings({}).plots_dir is None
