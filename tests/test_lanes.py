"""The two test lanes (docs/testing.md): tests that start processes are marked ``slow``, out of the fast lane.

A static scan (``ast``) of the test files, so it costs nothing to run: a test that runs pytest in a
subprocess (``runpytest_subprocess``), starts xdist workers (a ``-n`` argument), or asks for a
conftest.py fixture that starts a process (``bench_process``, ``held_run``, ...) must carry
``@pytest.mark.slow`` or sit in a module whose ``pytestmark`` holds it. Calls to helper functions of
the same module count as the test's own code.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
#: ``-n 2``, ``-n2``, ``-n=2``, ``--numprocesses ...``: arguments that start xdist workers
XDIST_ARGUMENT = re.compile(r"^(-n(\d+|=.*|auto|logical)?|--numprocesses(=.*)?)$")
#: calls that start a process of their own
SPAWNING_CALLS = {"runpytest_subprocess", "popen", "spawn", "spawn_pytest", "runpython", "runpython_c"}


def _is_slow_mark(node: ast.expr) -> bool:
    """``pytest.mark.slow`` (or ``pytest.mark.slow(...)``)."""
    if isinstance(node, ast.Call):
        node = node.func
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "slow"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
    )


def _module_is_slow(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            marks = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            if any(_is_slow_mark(mark) for mark in marks):
                return True
    return False


def _starts_a_process(node: ast.AST) -> str | None:
    """Why ``node``'s own code starts a process, or None."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Constant) and isinstance(inner.value, str) and XDIST_ARGUMENT.match(inner.value):
            return f"starts xdist workers ({inner.value!r})"
        if isinstance(inner, ast.Attribute) and inner.attr in SPAWNING_CALLS:
            return f"calls {inner.attr}"
    return None


def _parameters(function: ast.FunctionDef) -> set[str]:
    return {arg.arg for arg in function.args.args + function.args.kwonlyargs}


def _spawning_fixtures() -> dict[str, str]:
    """conftest.py's fixtures that start a process, directly or through another such fixture."""
    tree = ast.parse((TESTS / "conftest.py").read_text(encoding="utf-8"))
    fixtures = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any("fixture" in ast.unparse(decorator) for decorator in node.decorator_list)
    }
    spawning = {name: why for name, node in fixtures.items() if (why := _starts_a_process(node))}
    grew = True
    while grew:
        grew = False
        for name, node in fixtures.items():
            used = sorted(_parameters(node) & set(spawning))
            if name not in spawning and used:
                spawning[name] = f"uses {used[0]}"
                grew = True
    return spawning


def _tests_that_start_processes(source: str, spawning: dict[str, str]) -> dict[str, tuple[str, bool]]:
    """Test name -> (why it starts a process, whether it is marked slow), for one test file's source."""
    tree = ast.parse(source)
    module_slow = _module_is_slow(tree)
    helpers = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    found = {}

    def why(function: ast.FunctionDef, seen: set[str]) -> str | None:
        if reason := _starts_a_process(function):
            return reason
        used = sorted(_parameters(function) & set(spawning))
        if used:
            return f"uses the fixture {used[0]}, which {spawning[used[0]]}"
        for call in ast.walk(function):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
                helper = helpers.get(call.func.id)
                if helper is not None and helper.name not in seen and (reason := why(helper, seen | {helper.name})):
                    return f"calls {helper.name}, which {reason}"
        return None

    classes = [(node, _is_slow_mark_list(node.decorator_list)) for node in tree.body if isinstance(node, ast.ClassDef)]
    candidates = [(node, False) for node in tree.body if isinstance(node, ast.FunctionDef)]
    candidates += [
        (item, class_slow) for node, class_slow in classes for item in node.body if isinstance(item, ast.FunctionDef)
    ]
    for function, class_slow in candidates:
        if not function.name.startswith("test"):
            continue
        reason = why(function, {function.name})
        if reason:
            slow = module_slow or class_slow or _is_slow_mark_list(function.decorator_list)
            found[function.name] = (reason, slow)
    return found


def _is_slow_mark_list(decorators: list[ast.expr]) -> bool:
    return any(_is_slow_mark(decorator) for decorator in decorators)


def test_every_test_that_starts_a_process_is_marked_slow() -> None:
    spawning = _spawning_fixtures()
    unmarked = []
    for path in sorted(TESTS.glob("test_*.py")):
        for name, (reason, slow) in _tests_that_start_processes(path.read_text(encoding="utf-8"), spawning).items():
            if not slow:
                unmarked.append(f"{path.name}::{name}: {reason}")
    assert not unmarked, "mark these @pytest.mark.slow (docs/testing.md):\n" + "\n".join(unmarked)


SAMPLE = """
import pytest

def _run(pytester):
    return pytester.runpytest_subprocess("-q")

def test_xdist(bench):
    bench("-n", "2")

@pytest.mark.slow
def test_xdist_marked(bench):
    bench("-n2")

def test_helper(pytester):
    _run(pytester)

def test_fixture(held_run):
    held_run.start()

def test_in_process(bench):
    bench("-k", "k1")

class TestGrouped:
    def test_method(self, pytester):
        pytester.runpytest_subprocess()
"""


def test_the_scan_finds_each_way_of_starting_a_process() -> None:
    # Guards the scan itself, on a fixed sample: each way the suite starts a process is seen, marks are read.
    spawning = _spawning_fixtures()
    assert {"bench_process", "held_run"} <= set(spawning), spawning
    found = _tests_that_start_processes(SAMPLE, spawning)
    assert {name: slow for name, (_, slow) in found.items()} == {
        "test_xdist": False,
        "test_xdist_marked": True,
        "test_helper": False,
        "test_fixture": False,
        "test_method": False,
    }
    assert "calls _run, which calls runpytest_subprocess" == found["test_helper"][0]
    assert _tests_that_start_processes("import pytest\npytestmark = [pytest.mark.slow]\n" + SAMPLE, spawning)[
        "test_xdist"
    ][1]


def test_slow_is_registered_and_the_plain_command_runs_everything(pytestconfig: pytest.Config) -> None:
    assert any(line.split(":")[0].strip() == "slow" for line in pytestconfig.getini("markers"))
    addopts = pytestconfig.getini("addopts")
    assert "-m" not in addopts and not any(option.startswith("-m") for option in addopts), addopts


# --- threads on several workers -------------------------------------------------------------------


def test_a_suite_on_several_workers_shares_the_cores_out_among_them() -> None:
    from pytest_specbench.settings.devices import threads_per_worker

    assert threads_per_worker(2, 2) == 1 and threads_per_worker(2, 8) == 4 and threads_per_worker(3, 8) == 2
    assert threads_per_worker(16, 8) == 1
    assert threads_per_worker(0, 8) is None and threads_per_worker(1, 8) is None


def test_this_worker_started_with_the_threads_the_suite_gave_it() -> None:
    from conftest import CALLERS_THREADS, PROCESS_THREADS, SUITE_THREADS, available_cores
    from pytest_specbench.settings.devices import threads_per_worker

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2:
        pytest.skip("the suite runs in one process here: torch keeps its own thread count")
    given = os.environ[SUITE_THREADS]  # set by the controller before the workers started
    if given == CALLERS_THREADS:
        pytest.skip("the caller set the thread counts (OMP_NUM_THREADS or MKL_NUM_THREADS): they are kept")
    assert int(given) == threads_per_worker(workers, available_cores())
    assert PROCESS_THREADS == int(given)  # torch's threads when this worker started
