"""Bounds: the cost probe measures no block a run cannot use, and every numeric option refuses what cannot run."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from pytest_specbench.measure.costs import probe_positions, probed_k
from pytest_specbench.settings.config import ConfigError, parse_settings
from pytest_specbench.settings.options import MAX_POSITIONS, MAX_SEED, OPTIONS


def _parse(name: str, raw: str):
    return parse_settings({name: (raw, f"--specbench-{name}")})


# --- the cost probe ---------------------------------------------------------------------------------


def test_the_probe_stops_at_k_plus_one_the_new_tokens_and_the_window() -> None:
    assert probed_k((1, 4)) == 4 and probed_k(("auto",)) == 16  # as before, with no bound given
    assert probed_k((1, 4), new_tokens=12) == 4
    assert probed_k((100000,), new_tokens=12) == 11  # a block never holds more than the new tokens
    assert probed_k((64,), new_tokens=4, room=44) == 3  # a 20-token prompt in a 64-position window, 4 new tokens
    assert probed_k(("auto", 1), new_tokens=32, room=10) == 9  # the window after the prompt
    assert probe_positions(8, new_tokens=1) == 2  # v(1) and v(2), which the cost model needs, where room allows
    assert probe_positions(8, new_tokens=1, room=1) == 1


def test_a_k_no_step_can_draft_is_a_usage_error_naming_the_longest_that_can() -> None:
    # Before: k=1000 with 8 new tokens ran as k=7 and the answer called k=1000 best.
    with pytest.raises(
        ConfigError,
        match=r"--specbench-k=1,1000: no step drafts more than 7 token\(s\) with --specbench-max-new-tokens=8 .*"
        r"k=1000 would run as k=7; accepted: k up to 7, or more new tokens",
    ):
        parse_settings({"k": ("1,1000", "--specbench-k"), "max-new-tokens": ("8", "--specbench-max-new-tokens")})
    config = parse_settings({"k": ("7,auto", "--specbench-k"), "max-new-tokens": ("8", "--specbench-max-new-tokens")})
    assert config.ks == (7, "auto")  # a schedule chooses within the new tokens by itself


@pytest.mark.slow
def test_a_schedule_past_a_short_window_with_few_new_tokens_runs(
    bench, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from factory import write_tiny_pair

    short = write_tiny_pair(tmp_path_factory.mktemp("window_64"), target_config={"n_positions": 64})
    # A schedule's probe measures to k=16: with 4 new tokens it must stop at them.
    result = bench(
        "--specbench-k=auto",
        "--specbench-context-tokens=20",
        "--specbench-max-new-tokens=4",
        "-k",
        "natural",
        "--specbench-log=",
        pairs_file=short,
    )
    result.assert_outcomes(passed=1, deselected=1)
    assert "IndexError" not in result.stdout.str()


# --- bounds of the options --------------------------------------------------------------------------


def test_a_huge_k_is_a_usage_error_stating_the_bound() -> None:
    with pytest.raises(
        ConfigError,
        match=rf"--specbench-k=.*100000000000000000000000 is too large; accepted: an "
        rf"integer >= 1 and <= {MAX_POSITIONS - 1} \(a verify block of k \+ 1 "
        rf"positions must fit in a context window, and none holds more than "
        rf"{MAX_POSITIONS}\)",
    ):
        _parse("k", "1,100000000000000000000000")
    longest = parse_settings(
        {
            "k": (f"{MAX_POSITIONS - 2}", "--specbench-k"),
            "max-new-tokens": (f"{MAX_POSITIONS - 1}", "--specbench-max-new-tokens"),
        }
    )
    assert longest.ks == (MAX_POSITIONS - 2,)  # the most new tokens leave room for this k, one token fewer


def test_a_huge_k_stops_pytest_before_any_model_loads(bench) -> None:
    result = bench("--specbench-k=100000000000000000000000")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "is too large" in result.stderr.str()


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("max-new-tokens", str(MAX_POSITIONS), "too large; accepted: an integer >= 1 and <= 16777215"),
        ("context-tokens", str(10**30), "too large"),
        ("seed", str(MAX_SEED + 1), "too large; accepted: an integer >= 0 and <= 18446744073709551614"),
        ("threads", str((os.cpu_count() or 1) + 1), "logical CPUs"),
    ],
)
def test_integers_past_what_can_run_are_refused(name: str, raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"--specbench-{name}=.*{message}"):
        _parse(name, raw)


def test_a_prompt_and_new_tokens_past_any_window_are_refused() -> None:
    with pytest.raises(ConfigError, match="need more positions than any context window holds"):
        parse_settings(
            {
                "context-tokens": (str(MAX_POSITIONS - 8), "--specbench-context-tokens"),
                "max-new-tokens": ("16", "--specbench-max-new-tokens"),
            }
        )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("1.5", "'1.5' is outside \\(0, 1\\); accepted: a fraction in \\(0, 1\\)"),
        ("1", "outside \\(0, 1\\)"),
        ("0", "outside \\(0, 1\\)"),
        ("nan", "'nan' is not a number"),
        ("inf", "'inf' is infinite"),
    ],
)
def test_the_interval_target_is_a_fraction_in_0_1(raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"--specbench-ci-target=.*{message}"):
        _parse("ci-target", raw)
    assert _parse("ci-target", "0.5").ci_target == 0.5


def _numeric(option) -> bool:
    """An option whose value is a number (or a list of them): it parses one of "1", "0.5", "100" to numbers."""
    if option.flag:
        return False
    for sample in ("1", "0.5", "100"):
        try:
            value = option.parse(sample)
        except ValueError:
            continue
        values = value if isinstance(value, tuple) else (value,)
        return all(isinstance(item, (int, float)) and not isinstance(item, bool) for item in values)
    return False


NUMERIC = [option for option in OPTIONS if _numeric(option)]


def test_the_audit_covers_every_numeric_option() -> None:
    assert {option.name for option in NUMERIC} >= {
        "k",
        "prompts-per-category",
        "context-tokens",
        "max-new-tokens",
        "warmup",
        "min-rounds",
        "max-rounds",
        "ci-target",
        "case-budget",
        "threads",
        "tie-tolerance",
        "temperature",
        "top-p",
        "top-k",
        "seed",
        "sampling-check-draws",
        "max-acceptance-drop",
        "max-speedup-drop",
    }


@pytest.mark.parametrize("option", NUMERIC, ids=lambda option: option.name)
@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "1e400", "NaN"])
def test_no_numeric_option_takes_nan_or_infinity(option, raw: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _parse(option.name, raw)
    message = str(caught.value)
    assert any(words in message for words in ("is not a number", "is infinite", "is not a whole number")), message
    assert "negative" not in message


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("max-acceptance-drop", "1.5", "above 1; accepted: a number in \\[0, 1\\]"),
        ("max-speedup-drop", "2", "above 1"),
        ("case-budget", "inf", "infinite; accepted: a finite number > 0"),
        ("tie-tolerance", "inf", "infinite"),
        ("top-p", "nan", "'nan' is not a number; accepted: a number in \\(0, 1\\]"),
    ],
)
def test_fractions_and_finite_numbers(name: str, raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"--specbench-{name}=.*{message}"):
        _parse(name, raw)


def test_every_value_parsed_is_finite() -> None:
    config = parse_settings({})
    for option in NUMERIC:
        value = getattr(config, option.field)
        for item in value if isinstance(value, tuple) else (value,):
            assert item is None or isinstance(item, str) or math.isfinite(item), option.name


def test_the_bounds_are_in_the_options_reference() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "options.md").read_text(encoding="utf-8")
    assert "in (0, 1)" in text  # --specbench-ci-target
