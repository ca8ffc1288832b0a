"""Shared fixtures: the tiny pairs on disk and a runner of the shipped benchmark module through pytester.

The helper module ``factory`` is importable because ``pythonpath = ["tests"]``
in pyproject.toml. Runs inside pytester (xdist workers included) never import
it: the pairs are written here, in the parent process, and passed by path.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from factory import NEW_TOKENS, REPETITIVE_PROMPT, hf_generate, torch_threads, word_gpt2, write_tiny_pair
from torch.utils.cpp_extension import _get_build_directory
from transformers import GPT2LMHeadModel

from pytest_specbench.settings.devices import threads_per_worker

#: torch's threads in a fresh process on this machine, before any test sets them
PROCESS_THREADS = torch.get_num_threads()

BENCH_MODULE = Path(__file__).resolve().parents[1] / "bench_cases" / "test_speculative.py"

# pytester gives each test's child processes a HOME of their own, where torch would build the few-rows kernel
# again (minutes, once per test): they build into this process's folder, so the kernel is built once per machine.
os.environ.setdefault("TORCH_EXTENSIONS_DIR", _get_build_directory("", verbose=False))


# --- the suite on every core --------------------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config):
    """``pytest tests`` runs on one pytest-xdist worker a core (``-n auto``, tests shared by work stealing) unless
    the command names ``-n`` (``-n 0``: one process), or runs without xdist (``-p no:xdist``) or under ``--pdb``
    (xdist itself then runs one process). Every test passes beside another (docs/testing.md)."""
    if getattr(config.option, "numprocesses", "absent") is None and not hasattr(config, "workerinput"):
        config.option.numprocesses = "auto"
        if config.option.dist == "no":
            config.option.dist = "worksteal"
    return (yield)


#: the thread counts the suite's controller shares out to its workers, and the variable it sets beside them, so a
#: test can tell its counts from a caller's
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
SUITE_THREADS = "SPECBENCH_SUITE_THREADS"
CALLERS_THREADS = "the caller's"


def available_cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def share_cores_among_workers(config: pytest.Config) -> None:
    """In the controller, once xdist has settled its workers (``-n auto``, ``--maxprocesses``, ``--pdb``): the
    thread variables for the workers, which inherit them when they start, as does every process a test starts. A
    count the caller set (either variable) is kept."""
    if hasattr(config, "workerinput") or getattr(config.option, "dist", "no") == "no":
        return
    # On 2 cores a thread a core in each worker, beside the processes its tests start, made the suite take 1.3 times
    # as long (docs/results/2026-12-07-epyc-suite-threads.md).
    threads = threads_per_worker(len(getattr(config.option, "tx", None) or ()), available_cores())
    if threads is None:
        return
    if any(name in os.environ for name in THREAD_VARIABLES):
        os.environ[SUITE_THREADS] = CALLERS_THREADS
        return
    for name in (*THREAD_VARIABLES, SUITE_THREADS):
        os.environ[name] = str(threads)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slow tests first, in their order, then the rest (every process sorts alike): on every core, the long
    tests start early and the short ones fill the cores at the end, where a long one started last would run
    alone while the others wait."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_configure(config: pytest.Config) -> None:
    """Before any worker starts: share the cores out among the workers; build the few-rows kernel where this machine
    has no build yet, saying so (it takes a minute or two, and the workers would wait on it in silence)."""
    from pytest_specbench.kernels import few_rows

    share_cores_among_workers(config)
    if hasattr(config, "workerinput") or few_rows.build_cached():
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    say = reporter.write_line if reporter is not None else print
    say("tests/conftest.py: building the engine's few-rows kernel for this CPU, once per machine (a minute or two)")
    started = time.monotonic()
    reason = few_rows.unavailable_reason()
    say(f"  built in {time.monotonic() - started:.0f} s" if reason is None else f"  not built: {reason}")


@pytest.fixture(autouse=True)
def inner_runs_are_runs_of_their_own(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pytester run inside an xdist worker is a plain run: the worker's ``PYTEST_XDIST_*`` variables, which
    pytest-benchmark reads to switch itself off on workers, are not passed on to it."""
    if "pytester" in request.fixturenames:
        for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
            monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def forms_settled_per_test(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Each test settles its models' kernel forms in a folder of its own (kernels/settled_forms.py), shared by the
    runs inside it, so that a form a test plants is the one it gets, whatever another test settled for the same
    shapes. Created only where a test settles forms."""
    from pytest_specbench.kernels.settled_forms import FORMS_DIR_VARIABLE

    test = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:16]
    monkeypatch.setenv(FORMS_DIR_VARIABLE, str(tmp_path_factory.getbasetemp() / "kernel-forms" / test))


# --- the plugin through pytester ---------------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pairs TOML defining pair ``tiny``: a byte-level GPT-2 and a draft that agrees with it often."""
    return write_tiny_pair(tmp_path_factory.mktemp("tiny_pair"), name="tiny", noise=0.01)


@pytest.fixture(scope="session")
def weak_pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same pair id ``tiny`` and target with a much worse draft: a regression for the gate."""
    return write_tiny_pair(tmp_path_factory.mktemp("weak_pair"), name="tiny", noise=0.2)


def tiny_run(args: tuple[str, ...], pairs_file: Path, prompts: str, benchmark: bool) -> list[str]:
    """The options of a small, fast run on pair ``tiny`` of ``pairs_file``; ``args`` come last and win."""
    options = [
        f"--specbench-pairs-file={pairs_file}", "--specbench-pairs=tiny", f"--specbench-prompts={prompts}",
        "--specbench-k=1,4", "--specbench-max-new-tokens=12", "--specbench-warmup=0", "--specbench-min-rounds=1",
        "--specbench-max-rounds=1", "--specbench-dtype=float32",
        "-p", "no:cacheprovider", "-p", "no:randomly",
    ]  # fmt: skip
    if not benchmark and not any(arg.startswith("--benchmark") for arg in args):
        options.append("--benchmark-disable")
    return [*options, *args]


@pytest.fixture
def bench(pytester: pytest.Pytester, tiny_pairs_file: Path) -> Callable[..., pytest.RunResult]:
    """Run the shipped benchmark module in pytester on pair ``tiny``, with small, fast settings.

    ``bench(*args, pairs_file=..., prompts=..., benchmark=False, defaults=True, interrupted=False)``:
    ``args`` come last and win; ``defaults=False`` leaves out the tiny-run options
    (for ini tests). pytest-benchmark is disabled unless ``benchmark`` is true or
    an ``args`` item is a ``--benchmark*`` option. ``interrupted=True`` keeps a
    KeyboardInterrupt of the run inside it (pytester passes it on by default).
    """
    pytester.makepyfile(test_speculative=BENCH_MODULE.read_text(encoding="utf-8"))

    def run(
        *args: str,
        pairs_file: Path = tiny_pairs_file,
        prompts: str = "natural,code_json",
        benchmark: bool = False,
        defaults: bool = True,
        interrupted: bool = False,
    ) -> pytest.RunResult:
        options = tiny_run(args, pairs_file, prompts, benchmark) if defaults else args
        # A run here records the threads a fresh process has, as a run in a child process does: a module's
        # one-thread fixture may still hold this worker's threads while another module's test runs beside it
        with torch_threads(PROCESS_THREADS):
            return pytester.runpytest(*options, **({"no_reraise_ctrlc": True} if interrupted else {}))

    return run


@pytest.fixture
def fails_plainly(bench) -> Callable[..., pytest.RunResult]:
    """``fails_plainly(pairs_file, selection, *args)``: run the one case ``-k selection`` picks, which must
    fail with a message alone (no traceback, no IndexError from inside a model); return the run."""

    def run(pairs_file: Path, selection: str, *args: str) -> pytest.RunResult:
        result = bench(*args, "-k", selection, pairs_file=pairs_file)
        result.assert_outcomes(failed=1, deselected=3)
        assert "Traceback" not in result.stdout.str() and "IndexError" not in result.stdout.str()
        return result

    return run


@pytest.fixture
def bench_process(pytester: pytest.Pytester, tiny_pairs_file: Path) -> Callable[..., subprocess.Popen]:
    """Start :func:`bench`'s run as a separate ``python -m pytest`` process, to signal or kill.

    ``bench_process(*args, prompts=..., new_session=False)`` returns the Popen; its output
    goes to ``output.txt`` in the pytester folder. ``new_session`` gives it a process group
    of its own, to signal as ``timeout`` does.
    """
    pytester.makepyfile(test_speculative=BENCH_MODULE.read_text(encoding="utf-8"))

    def start(*args: str, prompts: str = "natural,code_json", new_session: bool = False) -> subprocess.Popen:
        command = [sys.executable, "-m", "pytest", *tiny_run(args, tiny_pairs_file, prompts, False)]
        with open(pytester.path / "output.txt", "w", encoding="utf-8") as output:  # the child keeps its own copy
            return pytester.popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=new_session)

    return start


class HeldRun:
    """A six-case run in a process of its own that holds every case after the first two while the file ``hold``
    exists (under xdist, the other worker's blocks too).

    :meth:`start` returns once the first two cases are in the results log, so a signal sent then
    always finds two cases finished and one running, whatever the machine's speed.
    """

    PROMPTS = "natural,code_json,dialogue"  # run in the prompt file's order: natural, dialogue, code_json
    FINISHED = ["tiny-k1-natural", "tiny-k4-natural"]
    UNFINISHED = ["tiny-k1-dialogue", "tiny-k4-dialogue", "tiny-k1-code_json", "tiny-k4-code_json"]
    #: a guard against a hung child, not a measurement: the runs take seconds
    PATIENCE_S = 300
    CONFTEST = """
        import pathlib
        import time

        import pytest


        @pytest.fixture(autouse=True)
        def hold_the_third_case(request):
            # Every case after the first two waits, so under xdist the other worker's blocks wait too.
            if not any(f"[{case}]" in request.node.nodeid for case in ("tiny-k1-natural", "tiny-k4-natural")):
                while pathlib.Path("hold").exists():
                    time.sleep(0.05)
    """

    def __init__(self, pytester: pytest.Pytester, bench_process: Callable[..., subprocess.Popen]) -> None:
        self.path = pytester.path
        self._pytester = pytester
        self._bench_process = bench_process

    def start(self, *args: str, new_session: bool = False) -> subprocess.Popen:
        self._pytester.makeconftest(self.CONFTEST)
        (self.path / "hold").touch()
        process = self._bench_process(*args, prompts=self.PROMPTS, new_session=new_session)
        self.wait_for(
            lambda: self.logged_cases() == self.FINISHED or process.poll() is not None, "two finished cases in the log"
        )
        assert process.poll() is None, self.output()
        return process

    def release(self) -> None:
        (self.path / "hold").unlink()

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.PATIENCE_S
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"gave up waiting for {what}")
            time.sleep(0.1)

    def logged_cases(self, name: str = "spec_results.jsonl") -> list[str]:
        """Cases in a results log, in order (the run's line left out)."""
        path = self.path / name
        if not path.exists():
            return []
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [record["case"] for record in records if "case" in record]

    def output(self) -> str:
        return (self.path / "output.txt").read_text()


@pytest.fixture
def held_run(pytester: pytest.Pytester, bench_process) -> HeldRun:
    """:class:`HeldRun` in the pytester folder."""
    return HeldRun(pytester, bench_process)


@pytest.fixture
def six_case_bench(bench) -> Callable[..., pytest.RunResult]:
    """:func:`bench` with three prompts (six cases) and pytest-benchmark left on, as in a plain run.

    (pytest-xdist switches pytest-benchmark off on its workers.)
    """
    return functools.partial(bench, prompts="natural,code_json,dialogue", benchmark=True)


# --- the drafter tests' target ------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpt2_target() -> GPT2LMHeadModel:
    """The drafter tests' target: :func:`factory.word_gpt2`."""
    return word_gpt2()


@pytest.fixture(scope="module")
def repetitive_prompt() -> torch.Tensor:
    """:data:`factory.REPETITIVE_PROMPT` as a batch of one."""
    return torch.tensor([REPETITIVE_PROMPT])


@pytest.fixture(scope="module")
def gpt2_reference(gpt2_target, repetitive_prompt) -> torch.Tensor:
    """The prompt and :data:`factory.NEW_TOKENS` greedy tokens of ``generate()``, EOS ignored."""
    new = hf_generate(gpt2_target, repetitive_prompt, NEW_TOKENS)
    return torch.tensor([REPETITIVE_PROMPT + new])


# --- threads ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module of tiny-model tests: faster and steadier on a busy 2-core machine."""
    with torch_threads(1):
        yield
