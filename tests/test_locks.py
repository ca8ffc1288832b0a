"""A run locks the files it writes for its lifetime: a second run on them is a usage error naming the first."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from pytest_specbench.results.lock import LockedByAnotherRun, RunLock, lock_file_of


def test_a_second_lock_names_the_holder_and_a_released_lock_leaves_no_file(tmp_path: Path) -> None:
    first = RunLock("pytest bench_cases")
    first.acquire([tmp_path / "spec_results.csv", tmp_path / "spec_results.jsonl"])
    holder = json.loads(lock_file_of(tmp_path / "spec_results.jsonl").read_text())
    assert holder["pid"] == os.getpid() and holder["command"] == "pytest bench_cases" and holder["started"]

    second = RunLock("pytest again")
    with pytest.raises(
        LockedByAnotherRun,
        match=rf"spec_results.jsonl is in use by another run \(pid {os.getpid()}, "
        rf"started {re.escape(holder['started'])}.*`pytest bench_cases`\)",
    ):
        second.acquire([tmp_path / "other.csv", tmp_path / "spec_results.jsonl"])
    assert second.held == []  # what it had taken is let go
    assert sorted(path.name for path in tmp_path.iterdir()) == [".spec_results.csv.lock", ".spec_results.jsonl.lock"]

    first.release()
    first.release()  # twice is harmless
    assert list(tmp_path.iterdir()) == []
    second.acquire([tmp_path / "spec_results.jsonl"])
    second.release()


def test_a_link_and_its_target_share_one_lock(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert lock_file_of(tmp_path / "link" / "a.csv") == tmp_path / "real" / ".a.csv.lock"


@pytest.mark.slow
def test_a_second_run_on_the_same_files_is_a_usage_error_naming_the_first(
    held_run, bench, pytester: pytest.Pytester
) -> None:
    process = held_run.start()
    result = bench("-k", "k1 and natural")  # the same default files
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"*--specbench-csv=spec_results.csv is in use by another run (pid {process.pid}, "
            "started *): two runs on one file would overwrite each other's results*"
        ]
    )
    assert held_run.logged_cases() == held_run.FINISHED  # the first run's log is untouched

    # Other files: it runs beside the first.
    bench("-k", "k1 and natural", "--specbench-csv=other.csv", "--specbench-json=other.json").assert_outcomes(
        passed=1, deselected=3
    )
    held_run.release()
    assert process.wait(held_run.PATIENCE_S) == pytest.ExitCode.OK, held_run.output()
    assert held_run.logged_cases() == [
        "tiny-k1-natural",
        "tiny-k4-natural",
        "tiny-k1-dialogue",
        "tiny-k4-dialogue",
        "tiny-k1-code_json",
        "tiny-k4-code_json",
    ]
    assert not list(pytester.path.glob(".*.lock"))


@pytest.mark.slow
def test_under_xdist_only_the_controller_locks(held_run, pytester: pytest.Pytester) -> None:
    process = held_run.start("-n", "2")
    holder = json.loads((pytester.path / ".spec_results.jsonl.lock").read_text())
    assert holder["pid"] == process.pid  # the controller's, and the workers ran beside it
    held_run.release()
    assert process.wait(held_run.PATIENCE_S) == pytest.ExitCode.OK, held_run.output()
    assert len(held_run.logged_cases()) == 6
    assert not list(pytester.path.glob(".*.lock"))


INTERRUPT_AT_THE_THIRD_CASE = """
    import pytest

    @pytest.fixture(autouse=True)
    def interrupt(request):
        if "[tiny-k1-code_json]" in request.node.nodeid:
            raise KeyboardInterrupt
"""


@pytest.mark.slow
def test_the_locks_go_at_the_end_of_a_failed_or_interrupted_run(bench, pytester: pytest.Pytester) -> None:
    # In one process, as pytester runs them: a lock left behind would refuse the next run.
    pytester.makeconftest("import pytest\n\n@pytest.fixture(autouse=True)\ndef fail():\n    raise RuntimeError\n")
    bench("-k", "k1 and natural").assert_outcomes(errors=1, deselected=3)
    pytester.makeconftest(INTERRUPT_AT_THE_THIRD_CASE)
    assert bench(interrupted=True).ret == pytest.ExitCode.INTERRUPTED
    assert not list(pytester.path.glob(".*.lock"))
    (pytester.path / "conftest.py").unlink()
    bench("--specbench-resume=spec_results.jsonl").assert_outcomes(passed=4)
