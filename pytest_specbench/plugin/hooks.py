"""pytest entry point of pytest-specbench (registered through ``pytest11``).

Hooks only: each maps pytest onto the plain objects of the other modules
(SpecbenchConfig, SpecbenchSession, ModelStore, run_case, report).
"""

from __future__ import annotations

from typing import Any

import pytest

from ..settings.config import ConfigError, check_files, cuda_available, parse_settings, read_settings
from ..settings.options import OPTIONS
from .session import RESULT_KEY, SpecbenchSession

_session_key = pytest.StashKey[SpecbenchSession]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specbench", "speculative decoding benchmarks (pytest-specbench)")
    for option in OPTIONS:
        if option.flag:
            group.addoption(option.cli, dest=option.dest, action="store_true", default=None, help=option.help)
        else:
            group.addoption(option.cli, dest=option.dest, default=None, metavar=option.metavar, help=option.help)
        parser.addini(option.dest, option.help, type="bool" if option.flag else "string")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "specbench(pair, k, prompt, engine): a speculative decoding benchmark case")
    # Also set on every case; declared here too so --strict-markers passes without xdist.
    config.addinivalue_line("markers", "xdist_group(name): cases that share an xdist worker")
    from ..settings.devices import check_devices

    try:
        settings = parse_settings(read_settings(config.getoption, config.getini), cuda_available)
        check_devices(settings.devices)
        session = SpecbenchSession.build(settings, config.rootpath, controller=not _is_worker(config))
        session.command = " ".join(["pytest", *map(str, config.invocation_params.args)])
        if not _is_worker(config):
            check_files(settings)
    except (ConfigError, ValueError) as error:
        raise pytest.UsageError(f"pytest-specbench: {error}") from None
    config.stash[_session_key] = session
    config.pluginmanager.register(SessionHooks(session), "specbench-results")
    if _wants_default_dist(config):
        config.option.dist = "loadgroup"
    if getattr(config.option, "dist", "no") == "loadgroup" and not _is_worker(config):
        from .xdist import PairGroupScheduler

        config.pluginmanager.register(PairGroupScheduler(session.cases), "specbench-xdist")


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_session_key, None)
    if session is not None:
        session.signals.restore()


def _wants_default_dist(config: pytest.Config) -> bool:
    """xdist is on and the user chose no --dist (xdist itself would pick "load")."""
    if not getattr(config.option, "numprocesses", None) or getattr(config.option, "dist", "no") not in ("no", "load"):
        return False
    import os
    import shlex

    given = [*config.invocation_params.args, *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
             *config.getini("addopts")]
    return not any(arg == "-d" or arg.startswith("--dist") for arg in given)


def _session(config: pytest.Config) -> SpecbenchSession:
    return config.stash[_session_key]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "spec_case" not in metafunc.fixturenames:
        return
    params = [pytest.param(case, id=case.id, marks=[
        pytest.mark.specbench(pair=case.pair.name, k=case.k, prompt=case.prompt_label, engine=case.engine),
        pytest.mark.xdist_group(case.pair.name),
    ]) for case in _session(metafunc.config).cases]
    metafunc.parametrize("spec_case", params)


@pytest.fixture(scope="session")
def specbench_config(request: pytest.FixtureRequest):
    """The session's validated SpecbenchConfig."""
    return _session(request.config).config


@pytest.fixture(scope="session")
def specbench_store(request: pytest.FixtureRequest):
    """Models loaded once per device for the whole session (one store per xdist worker)."""
    from ..settings.devices import resolve_device, set_cpu_threads
    from ..measure.store import ModelStore

    config = _session(request.config).config
    worker_id, worker_count = _worker(request.config)
    device = resolve_device(config.devices, int(worker_id.removeprefix("gw")) if worker_id else 0)
    set_cpu_threads(config.threads, device, worker_count)
    return ModelStore(device, config.dtype, config.cache_dir)


class CaseFixture:
    """What a benchmark test uses: ``result = specbench.run(spec_case)``, then ``specbench.assert_lossless(result)``."""

    def __init__(self, request: pytest.FixtureRequest, store) -> None:
        self._request = request
        self._store = store
        self._session = _session(request.config)

    def _benchmark(self):
        """pytest-benchmark's fixture when it is on; requesting it while off only earns a warning."""
        session = getattr(self._request.config, "_benchmarksession", None)
        if session is None or session.disabled or session.skip:
            return None
        return self._request.getfixturevalue("benchmark")

    def run(self, case) -> dict[str, Any]:
        """Measure the case and record its result row for the summary and files."""
        from ..models.base import ModelUnavailable, NotApplicable, UnrunnableCase
        from ..measure.runner import run_case
        from ..results.schema import extra_info_fields

        row = self._session.replay(case.id)
        if row is not None:  # finished in the run being resumed: its row again, nothing measured
            self._request.node.user_properties.append((RESULT_KEY, row))
            return row
        benchmark = self._benchmark()
        timer = None
        if benchmark is not None:
            def timer(run, before_each, rounds):
                benchmark.pedantic(run, setup=before_each, rounds=rounds, warmup_rounds=0, iterations=1)
        try:
            result = run_case(case, self._store, self._session.config, self._session.prompts, timer)
        except ModelUnavailable as error:
            if not self._session.chosen(case.pair):
                pytest.skip(str(error))
            raise pytest.fail.Exception(f"{case.pair.name}: {error}", pytrace=False) from None
        except NotApplicable as error:
            pytest.skip(str(error))
        except UnrunnableCase as error:
            # The message says what to change; a chained traceback into torch would only hide it.
            raise pytest.fail.Exception(str(error), pytrace=False) from None
        # Which worker ran it and what its store had loaded so far: shows models load once per worker.
        result.worker = _worker(self._request.config)[0] or "main"
        result.model_loads = dict(self._store.load_counts)
        row = result.to_row()
        if benchmark is not None:
            benchmark.extra_info.update({name: row[name] for name in extra_info_fields()})
        self._request.node.user_properties.append((RESULT_KEY, row))
        return row

    def assert_lossless(self, result: dict[str, Any]) -> None:
        from ..measure.verdicts import divergence_message

        if result["verdict"] == "diverged":
            pytest.fail(divergence_message(result["case"], result, self._session.config.tie_tolerance), pytrace=False)


@pytest.fixture
def specbench(request: pytest.FixtureRequest, specbench_store) -> CaseFixture:
    """Runs a ``spec_case`` and records its result."""
    return CaseFixture(request, specbench_store)


class SessionHooks:
    """Per-session hooks, each handing pytest's data to the SpecbenchSession.

    Rows come from each report's ``user_properties``, which pytest-xdist carries
    from the workers, so the controller sees every finished case either way.
    """

    def __init__(self, session) -> None:
        self.session = session
        self.unavailable: dict[str, str] = {}  # chosen pairs whose model is missing: their cases fail with this

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.session.count_collected("spec_case" in getattr(item, "fixturenames", ()) for item in items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # After -k/-m: only the cases that will run are checked, so no hub probe for the others.
        cases = [case for case in map(_case_of, session.items) if case is not None]
        self.session.select(case.id for case in cases)
        for item in session.items:
            case = _case_of(item)
            if case is None or self.session.replay(case.id) is not None:
                continue  # a resumed case needs no model
            reason = self.session.unavailable_reason(case.pair)
            if reason and self.session.chosen(case.pair):
                self.unavailable[case.pair.name] = reason
            elif reason:
                item.add_marker(pytest.mark.skip(reason=reason))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        # The controller collects nothing itself: the workers' collections say what will run.
        self.session.select(_case_id(nodeid) for nodeid in ids)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        case = _case_of(item)
        if case is not None and case.pair.name in self.unavailable:
            pytest.fail(self.unavailable[case.pair.name], pytrace=False)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.session.add_report(_case_id(report.nodeid), report.when, report.outcome, "specbench" in report.keywords,
                                report.user_properties)

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo) -> None:
        # Under CPython 3.11 a frame interrupted by a signal can have no line number, and pytest's
        # report of the interruption then dies with a TypeError (exit status 1, a traceback) after
        # the files were written. Leave such frames out of the report.
        excinfo.traceback = excinfo.traceback.filter(_has_line_number)

    @pytest.hookimpl(tryfirst=True)  # before xdist's own, which waits for busy workers to stop
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if _is_worker(session.config):
            return
        if self.session.finish(_interruption(session)) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(trylast=True)  # after pytest-benchmark's table: the specbench summary is read last
    def pytest_terminal_summary(self, terminalreporter, config: pytest.Config) -> None:
        if _is_worker(config):
            return
        for title, lines in self.session.summary_sections():
            terminalreporter.section(title)
            for line, is_error in lines:
                terminalreporter.write_line(line, red=is_error)


def _case_of(item: pytest.Item):
    """The benchmark case an item runs, or None for other tests."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("spec_case") if callspec is not None else None


def _case_id(nodeid: str) -> str:
    """The parameter id of a node id: ``test_speculative_decoding[tiny-k4-natural]`` -> ``tiny-k4-natural``."""
    return nodeid.partition("[")[2].partition("]")[0]


def _interruption(session: pytest.Session) -> str | None:
    """What stopped the run before every selected case ran (-x, --maxfail, Ctrl-C), or None."""
    stopped = session.shouldfail or session.shouldstop
    if stopped:
        return str(stopped)
    return "KeyboardInterrupt" if session.exitstatus == pytest.ExitCode.INTERRUPTED else None


def _has_line_number(entry) -> bool:
    try:
        entry.lineno  # noqa: B018 (the property fails when the frame has none)
    except TypeError:
        return False
    return True


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _worker(config: pytest.Config) -> tuple[str | None, int]:
    """This process's xdist worker id ("gw0", ...; None outside xdist) and the number of workers."""
    workerinput = getattr(config, "workerinput", {})
    return workerinput.get("workerid"), workerinput.get("workercount", 1)
