"""Installed beside another project's tests, the plugin changes nothing there until its cases or options are used."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

UNRELATED = "def test_unrelated():\n    assert 1 + 1 == 2\n"


@pytest.fixture
def read_only_project() -> Iterator[Path]:
    """A folder holding one unrelated test file, that nobody can write to (root included: see _run)."""
    folder = Path(tempfile.mkdtemp(prefix="unrelated-"))
    (folder / "test_unrelated.py").write_text(UNRELATED)
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    yield folder
    folder.chmod(stat.S_IRWXU)
    shutil.rmtree(folder)


def _run(folder: Path, *args: str, as_user: bool = True) -> subprocess.CompletedProcess:
    """pytest in ``folder`` as an ordinary user: root may write anywhere, so as root the run drops to nobody.

    Skipped when nobody cannot run this interpreter and import pytest and the plugin (a checkout or virtual
    environment under a folder that other users cannot enter, e.g. one made by ``mktemp -d``): what this
    test would then see is that folder's permissions, not the plugin."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]
    setpriv = shutil.which("setpriv")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(folder)}
    if as_user and os.geteuid() == 0:
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot make a folder read-only for this run")
        as_nobody = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
        probe = subprocess.run(
            [*as_nobody, sys.executable, "-c", "import pytest, pytest_specbench"],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if probe.returncode != 0:
            said = (probe.stderr.strip().splitlines() or ["no message"])[-1]
            pytest.skip(
                f"user nobody cannot run {sys.executable} and import pytest and pytest_specbench "
                f"({said}): the checkout or its virtual environment is under a folder other users "
                "cannot enter"
            )
        command = [*as_nobody, *command]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def test_an_unrelated_suite_in_a_read_only_folder_sees_no_specbench(read_only_project: Path) -> None:
    before = sorted(os.listdir(read_only_project))
    result = _run(read_only_project, "-q", "test_unrelated.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert "specbench" not in (result.stdout + result.stderr).lower()
    assert sorted(os.listdir(read_only_project)) == before


def test_an_unrelated_suite_under_xdist_keeps_xdists_own_scheduling(read_only_project: Path) -> None:
    # As this user: xdist's workers start the interpreter again, which an unprivileged user may not reach.
    before = sorted(os.listdir(read_only_project))
    result = _run(read_only_project, "-v", "-n", "2", "test_unrelated.py", as_user=False)
    # pytest-benchmark (a dependency, not this plugin) makes its storage folder wherever it may write.
    assert sorted(set(os.listdir(read_only_project)) - {".benchmarks"}) == before
    assert result.returncode == 0, result.stdout + result.stderr
    assert "scheduling tests via LoadScheduling" in result.stdout
    # pytest's verbose header lists every installed plugin; beyond that line no word of specbench.
    output = [line for line in (result.stdout + result.stderr).splitlines() if not line.startswith("plugins:")]
    assert "specbench" not in "\n".join(output).lower()


def test_the_plugin_builds_nothing_until_asked(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_specbench.plugin import activation

    started = []
    monkeypatch.setattr(activation.Activation, "_build", lambda self, check_outputs: started.append(1))
    pytester.makepyfile(UNRELATED)
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert not started
    written = {path.name for path in pytester.path.iterdir()} - {".benchmarks"}  # pytest-benchmark's, as above
    assert written == {"test_the_plugin_builds_nothing_until_asked.py"}


def test_a_specbench_option_wakes_the_plugin_and_a_bad_one_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(UNRELATED)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--specbench-k=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pytest-specbench: --specbench-k*"])


def test_collected_cases_wake_the_plugin_without_any_option(pytester: pytest.Pytester) -> None:
    from conftest import BENCH_MODULE

    pytester.makepyfile(test_speculative=BENCH_MODULE.read_text(encoding="utf-8"))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["*test_speculative_decoding[[]gpt2_distil-k1-natural[]]*"])


def test_pytest_help_lists_the_options_with_their_percent_signs(pytester: pytest.Pytester) -> None:
    # argparse formats help text with %: an unescaped "95% interval" once broke `pytest --help` in every project
    result = pytester.runpytest_subprocess("--help")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    result.stdout.fnmatch_lines(["*--specbench-ci-target=FRACTION*", "*95% interval*"])
