"""--specbench-kernels, once --specbench-head-kernel: the old name still parses (command line and ini), and what a
stored run recorded under it (a results log, a baseline, a run's JSON) compares equal to the same setting now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_specbench.cli import setting_differences
from pytest_specbench.results.gate_compare import check_settings
from pytest_specbench.results.gate_compare import settings_differences as baseline_differences
from pytest_specbench.results.log import LOG_FORMAT, read_log, settings_differences
from pytest_specbench.settings.config import (
    ConfigError,
    parse_settings,
    read_settings,
    result_settings,
    result_settings_from_raw,
)
from pytest_specbench.settings.options import OPTIONS, RENAMED, current_setting_names

OLD, NEW = "--specbench-head-kernel", "--specbench-kernels"
OLD_DEST, NEW_DEST = "specbench_head_kernel", "specbench_kernels"


def _config(cli: dict[str, str] | None = None, ini: dict[str, str] | None = None):
    cli, ini = cli or {}, ini or {}
    return parse_settings(read_settings(cli.get, ini.get))


def _recorded_before_the_rename(settings: dict) -> dict:
    """``settings`` as a run before the rename recorded them: the option under its old name, in its old place."""
    return {(OLD if name == NEW else name): value for name, value in settings.items()}


def test_the_option_names_what_it_governs_and_keeps_its_old_name():
    option = next(option for option in OPTIONS if option.field == "kernels")
    assert (option.cli, option.dest) == (NEW, NEW_DEST)
    assert option.alias_clis == (OLD,) and option.alias_dests == (OLD_DEST,)
    assert "deprecated" in option.help and OLD in option.help
    assert RENAMED == {OLD: NEW, OLD_DEST: NEW_DEST}


@pytest.mark.parametrize(
    ("cli", "ini", "expected"),
    [
        ({NEW_DEST: "linear"}, {}, "linear"),
        ({OLD_DEST: "column"}, {}, "column"),  # the old option on the command line
        ({}, {OLD_DEST: "rows"}, "rows"),  # the old ini key
        ({}, {NEW_DEST: "rows", OLD_DEST: "column"}, "rows"),  # the new name wins over the old
        ({OLD_DEST: "linear"}, {NEW_DEST: "column"}, "linear"),  # the command line wins over the ini, either name
        ({}, {}, "auto"),
    ],
)
def test_the_old_name_still_parses(cli, ini, expected):
    config = _config(cli, ini)
    assert config.kernels == expected
    assert result_settings(config)[NEW] == expected and OLD not in result_settings(config)


def test_a_bad_value_under_the_old_name_names_it():
    with pytest.raises(ConfigError, match=r"--specbench-head-kernel='fast': unknown kernel setting 'fast'; accepted"):
        _config({OLD_DEST: "fast"})
    with pytest.raises(ConfigError, match=r"ini specbench_head_kernel='fast'"):
        _config(ini={OLD_DEST: "fast"})


def test_settings_recorded_under_the_old_name_read_as_the_new():
    assert current_setting_names({OLD: "auto", "--specbench-k": [1]}) == {NEW: "auto", "--specbench-k": [1]}
    assert current_setting_names({OLD_DEST: "rows"}) == {NEW_DEST: "rows"}
    assert current_setting_names({OLD: "rows", NEW: "linear"}) == {NEW: "linear"}  # both: the current one stands


@pytest.mark.parametrize("kernel", ["auto", "linear"])
def test_a_resumed_log_of_the_old_name_has_no_settings_difference(kernel):
    now = result_settings(_config({NEW_DEST: kernel}))
    assert settings_differences(_recorded_before_the_rename(now), now) == []
    other = result_settings(_config({NEW_DEST: "column"}))
    assert settings_differences(_recorded_before_the_rename(now), other) == [
        f"{NEW}={kernel!r} in the log, 'column' now"
    ]


def test_a_log_holding_a_run_before_the_rename_and_one_after_reads_as_one_run(tmp_path: Path):
    now = result_settings(_config())
    path = tmp_path / "spec_results.jsonl"
    lines = [
        {"specbench_log": LOG_FORMAT, "settings": settings} for settings in (_recorded_before_the_rename(now), now)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    logged = read_log(path)
    assert logged.settings == now


def test_a_baseline_of_the_old_name_gates_without_a_settings_difference():
    now = result_settings(_config())
    assert baseline_differences(_recorded_before_the_rename(now), now) == ([], [])
    differences, unrecorded = baseline_differences(_recorded_before_the_rename(now), {**now, NEW: "linear"})
    assert [(d.name, d.baseline, d.now) for d in differences] == [(NEW, "auto", "linear")] and unrecorded == []
    baseline = {"cases": {}, "settings": _recorded_before_the_rename(now)}
    check = check_settings(baseline, [], now, "refuse")
    assert not check.refused and check.run_differences == []


def test_the_json_of_a_run_before_the_rename_merges_and_gates_as_the_same_setting():
    old, new = {"options": {OLD_DEST: "auto"}}, {"options": {NEW_DEST: "auto"}}
    assert setting_differences(old, new, "old", "new") == []
    assert setting_differences(old, {"options": {NEW_DEST: "linear"}}, "old", "new") == [
        f"{NEW_DEST}: old has 'auto', new has 'linear'"
    ]
    assert result_settings_from_raw({OLD_DEST: "linear"})[NEW] == "linear"
    assert OLD not in result_settings_from_raw({OLD_DEST: "linear"})


def test_pytest_help_shows_the_old_name_as_deprecated(pytester):
    result = pytester.runpytest("--help")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*--specbench-kernels=KERNEL*", "*--specbench-head-kernel=KERNEL*"])
    help_text = result.stdout.str()
    old_entry = help_text[help_text.index("--specbench-head-kernel=KERNEL") :]
    assert "deprecated: the earlier name of" in " ".join(old_entry.split()[:12])
