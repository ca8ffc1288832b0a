"""Output paths at their edges: symbolic links, PATH_MAX and NAME_MAX, non-UTF-8 names, folders given as files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_specbench.atomic import unwritable_reason, write_atomic
from pytest_specbench.settings.config import ConfigError, check_files, parse_settings

#: an undecodable byte in a file name, as Python holds it (a surrogate escape)
NON_UTF8 = os.fsdecode(b"r\xff")


def _files(**given: str):
    return parse_settings(
        {name.replace("_", "-"): (raw, f"--specbench-{name.replace('_', '-')}") for name, raw in given.items()}
    )


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


# --- symbolic links: written through ----------------------------------------------------------------


def test_a_symlinked_output_is_written_through_the_link(tmp_path: Path) -> None:
    target = tmp_path / "kept" / "results.csv"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "latest.csv"
    link.symlink_to(target)
    write_atomic(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(target)  # the link stays a link
    assert target.read_text() == "new"  # and its target is what was updated
    assert sorted(p.name for p in target.parent.iterdir()) == ["results.csv"]  # no temporary left


def test_the_probe_of_a_symlinked_output_checks_the_targets_folder(tmp_path: Path) -> None:
    link = tmp_path / "latest.json"
    link.symlink_to(tmp_path / "elsewhere" / "results.json")  # dangling: its folder does not exist yet
    assert unwritable_reason(link) is None
    assert (tmp_path / "elsewhere").is_dir() and not list((tmp_path / "elsewhere").iterdir())
    write_atomic(link, "{}")
    assert link.is_symlink() and (tmp_path / "elsewhere" / "results.json").read_text() == "{}"


def test_an_existing_output_that_refuses_writes_is_found_before_the_run(tmp_path: Path, monkeypatch) -> None:
    # chattr +i (or +a) refuses every open for writing, even root's; this process may not set it, so os.open
    # refuses as such a file does. Before: the run measured everything, then failed to write the log.
    log = tmp_path / "spec_results.jsonl"
    log.write_text("kept\n")
    real_open = os.open

    def immutable(path, flags, *args):
        if Path(path) == log and flags & (os.O_WRONLY | os.O_RDWR):
            raise PermissionError(1, "Operation not permitted")
        return real_open(path, flags, *args)

    assert unwritable_reason(log) is None
    monkeypatch.setattr(os, "open", immutable)
    assert unwritable_reason(log) == f"{log} exists and cannot be written (Operation not permitted)"
    with pytest.raises(ConfigError, match=r"--specbench-log.*exists and cannot be written \(Operation not permitted\)"):
        check_files(_files(log=str(log)))
    assert log.read_text() == "kept\n"


def test_two_links_to_one_file_are_two_outputs_on_one_file(tmp_path: Path) -> None:
    (tmp_path / "a.csv").symlink_to(tmp_path / "same")
    (tmp_path / "b.json").symlink_to(tmp_path / "same")
    with pytest.raises(ConfigError, match="--specbench-csv and --specbench-json name the same file"):
        check_files(_files(csv=str(tmp_path / "a.csv"), json=str(tmp_path / "b.json")))


# --- lengths: PATH_MAX is a usage error, a name near NAME_MAX is fine -----------------------------------


def test_a_path_longer_than_path_max_is_a_usage_error(tmp_path: Path) -> None:
    long = tmp_path / "/".join(["d" * 200] * 25) / "r.csv"  # 5000 bytes, every name short enough
    with pytest.raises(
        ConfigError,
        match=r"--specbench-csv=.*the path is \d+ bytes long, and this system takes "
        r"at most \d+ \(PATH_MAX\)",
    ):
        parse_settings({"csv": (str(long), "--specbench-csv")})
    with pytest.raises(ConfigError, match="PATH_MAX"):
        parse_settings({"baseline": (str(long), "--specbench-baseline")})  # an input too: no OSError
    with pytest.raises(ConfigError, match="PATH_MAX"):
        parse_settings({"plots": (str(long), "--specbench-plots")})


def test_a_name_longer_than_name_max_is_a_usage_error(tmp_path: Path) -> None:
    name = "n" * (_name_max(tmp_path) + 1)
    with pytest.raises(
        ConfigError,
        match=r"--specbench-json=.*bytes long, and the file system takes at most \d+ "
        r"\(NAME_MAX\)",
    ):
        parse_settings({"json": (str(tmp_path / name), "--specbench-json")})


def test_a_path_longer_than_path_max_stops_pytest_with_a_usage_error(bench, tmp_path: Path) -> None:
    long = tmp_path / "/".join(["d" * 200] * 25) / "r.csv"
    result = bench(f"--specbench-csv={long}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # not INTERNALERROR (3)
    assert "PATH_MAX" in result.stderr.str() and "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_a_254_character_file_name_is_accepted(tmp_path: Path) -> None:
    if _name_max(tmp_path) < 254:
        pytest.skip("this file system takes no 254-character name")
    path = tmp_path / ("r" * 250 + ".csv")
    assert len(path.name) == 254
    check_files(_files(csv=str(path), json="", log=""))  # the probe adds no character to the name
    write_atomic(path, "a,b\n")  # nor does the temporary file
    assert path.read_text() == "a,b\n" and [p.name for p in tmp_path.iterdir()] == [path.name]


# --- names that are not UTF-8 ------------------------------------------------------------------------


def test_text_quoting_a_non_utf8_name_is_written_with_its_bytes(tmp_path: Path) -> None:
    # A report quotes the command line, which holds the name as Python decoded it (surrogate escapes).
    path = tmp_path / f"{NON_UTF8}.md"
    write_atomic(path, f"pytest --specbench-report={NON_UTF8}.md\n")
    assert (tmp_path / os.fsdecode(b"r\xff.md")).read_bytes() == b"pytest --specbench-report=r\xff.md\n"


def test_a_non_utf8_name_is_a_valid_output_path(tmp_path: Path) -> None:
    config = _files(csv=str(tmp_path / f"{NON_UTF8}.csv"), report=str(tmp_path / f"{NON_UTF8}.md"))
    check_files(config)
    assert config.report_path.name == f"{NON_UTF8}.md"


# --- a folder where a file is needed ----------------------------------------------------------------------


@pytest.mark.parametrize("option", ["csv", "json", "log", "report", "save-baseline"])
def test_a_trailing_slash_or_a_folder_is_refused_for_a_file_output(tmp_path: Path, option: str) -> None:
    for raw in ("results/", str(tmp_path) + "/", str(tmp_path)):
        with pytest.raises(
            ConfigError, match=f"--specbench-{option}=.*is a folder, and a file path is needed; accepted: a file path"
        ):
            parse_settings({option: (raw, f"--specbench-{option}")})
    assert not (Path.cwd() / "results").exists()


# --- through pytest -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_symlinked_outputs_and_a_non_utf8_report_through_a_run(bench, pytester: pytest.Pytester) -> None:
    kept = pytester.path / "kept"
    kept.mkdir()
    for name in ("results.csv", "results.json"):
        (kept / name).write_text("stale")
        (pytester.path / f"latest{Path(name).suffix}").symlink_to(kept / name)
    result = bench(
        "-k",
        "k1 and natural",
        "--specbench-csv=latest.csv",
        "--specbench-json=latest.json",
        f"--specbench-report={NON_UTF8}.md",
        "--specbench-log=",
    )
    result.assert_outcomes(passed=1, deselected=3)
    assert (pytester.path / "latest.csv").is_symlink() and (pytester.path / "latest.json").is_symlink()
    assert "tiny-k1-natural" in (kept / "results.csv").read_text()
    assert [row["case"] for row in json.loads((kept / "results.json").read_text())["results"]] == ["tiny-k1-natural"]
    report = pytester.path / f"{NON_UTF8}.md"
    assert b"tiny" in report.read_bytes() and b"r\xff.md" in report.read_bytes()
    assert "could not write" not in result.stdout.str()


# --- the cache folder: checked with the outputs when a pair converts through it -------------------------

#: a source that loads through the cache (a GGUF file is converted once and kept there)
GGUF_SOURCE = "./models/tiny.gguf"


def test_an_unusable_cache_folder_is_a_usage_error_naming_where_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_specbench.settings.config import check_cache_dir

    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    monkeypatch.setenv("SPECBENCH_CACHE_DIR", str(blocker))
    with pytest.raises(
        ConfigError,
        match=f"SPECBENCH_CACHE_DIR={blocker}: it is a file, not a folder; "
        "accepted: a folder this user can create and write",
    ):
        check_cache_dir(_files(), [GGUF_SOURCE])
    monkeypatch.delenv("SPECBENCH_CACHE_DIR")
    under = blocker / "cache"
    with pytest.raises(
        ConfigError,
        match=f"--specbench-cache-dir={under}: the cache folder cannot be "
        f"created, since {blocker} is a file; accepted: ",
    ):
        check_cache_dir(_files(cache_dir=str(under)), ["gpt2", GGUF_SOURCE])
    # A run whose models never go through the cache (local checkpoints, hub ids) is not refused for it.
    check_cache_dir(_files(cache_dir=str(under)), ["gpt2", str(tmp_path)])


def _empty_read_only_folder(tmp_path: Path) -> Path | None:
    """An empty folder no file can be written in: a read-only one, or, for root (who writes anywhere), an
    empty sysfs folder (sysfs refuses new files even to root); None when there is none."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    if not os.access(folder, os.W_OK):
        return folder
    sysfs = Path("/sys/class")
    empty = (
        [path for path in sorted(sysfs.iterdir()) if path.is_dir() and not any(path.iterdir())]
        if sysfs.is_dir()
        else []
    )
    return empty[0] if empty else None


def test_an_empty_read_only_cache_is_refused_and_one_holding_conversions_is_accepted(tmp_path: Path) -> None:
    from pytest_specbench.settings.config import check_cache_dir

    empty = _empty_read_only_folder(tmp_path)
    try:
        if empty is None:
            pytest.skip("no empty folder here refuses new files to this user")
        with pytest.raises(
            ConfigError,
            match=f"--specbench-cache-dir={empty}: no file can be written in the "
            f"cache folder {empty} .*, and it is empty, so it holds no "
            "converted model to read; accepted: .*or a read-only one that "
            "already holds the converted models",
        ):
            check_cache_dir(_files(cache_dir=str(empty)), [GGUF_SOURCE])
    finally:
        (tmp_path / "read-only").chmod(0o755)
    held = tmp_path / "held"
    (held / "converted").mkdir(parents=True)
    held.chmod(0o555)
    try:
        check_cache_dir(_files(cache_dir=str(held)), [GGUF_SOURCE])  # what it holds may be what is needed
    finally:
        held.chmod(0o755)


def test_a_cache_folder_that_is_a_file_stops_pytest_with_a_usage_error(
    bench, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before any model loads, not a traceback in every case."""
    (pytester.path / "models").mkdir()
    (pytester.path / "models" / "tiny.gguf").write_bytes(b"not read: the run stops before")
    pairs = pytester.path / "pairs.toml"
    pairs.write_text(f'[pairs.tiny]\ntarget = "{GGUF_SOURCE}"\ndrafter = "prompt_lookup"\n', encoding="utf-8")
    (pytester.path / "cache").write_text("a file")
    monkeypatch.setenv("SPECBENCH_CACHE_DIR", str(pytester.path / "cache"))
    result = bench(pairs_file=pairs)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"SPECBENCH_CACHE_DIR={pytester.path / 'cache'}: it is a file, not a folder" in result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
