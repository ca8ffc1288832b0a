"""pytest entry point of pytest-specbench (registered through ``pytest11``).

Hooks only: each maps pytest onto the plain objects of the other modules. The plugin stays inert
(:mod:`.activation`) until a ``--specbench-*`` option is given or a specbench case is collected; only
then is the :class:`~.session.SpecbenchSession` built and its per-session hooks registered.
"""

from __future__ import annotations

import pytest

from ..settings.axes import AXIS_NAMES
from ..settings.options import OPTIONS
from .activation import ACTIVATION, Activation, case_id, is_worker

# The fixtures: pytest finds a plugin's fixtures among its module's names.
from .fixtures import (  # noqa: F401
    reported_result,
    specbench,
    specbench_blocks,
    specbench_config,
    specbench_shared,
    specbench_store,
)
from .session import SpecbenchSession


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specbench", "speculative decoding benchmarks (pytest-specbench)")
    for option in OPTIONS:
        shown = option.help.replace("%", "%%")  # argparse formats help with %: "95% interval" would read "%i"
        if option.flag:
            group.addoption(option.cli, dest=option.dest, action="store_true", default=None, help=shown)
        else:
            group.addoption(option.cli, dest=option.dest, default=None, metavar=option.metavar, help=shown)
        parser.addini(option.dest, option.help, type="bool" if option.flag else "string")
        for cli, dest in zip(option.alias_clis, option.alias_dests, strict=True):  # earlier names, still read
            deprecated = f"deprecated: the earlier name of {option.cli}, read as it"
            shape = {"action": "store_true"} if option.flag else {"metavar": option.metavar}
            group.addoption(cli, dest=dest, default=None, help=deprecated, **shape)
            parser.addini(dest, deprecated.replace(option.cli, option.dest), type="bool" if option.flag else "string")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"specbench({', '.join(AXIS_NAMES)}): a speculative decoding benchmark case")
    # Also set on every case; declared here too so --strict-markers passes without xdist.
    config.addinivalue_line("markers", "xdist_group(name): cases that share an xdist worker")
    activation = Activation(config, lambda session: _start(config, session))
    config.stash[ACTIVATION] = activation
    if activation.asked:  # a bad option is a usage error before collection, as for any pytest option
        activation.start()


def _start(config: pytest.Config, session: SpecbenchSession) -> None:
    config.pluginmanager.register(SessionHooks(session, lambda: config.stash[ACTIVATION].claim()), "specbench-results")


def pytest_unconfigure(config: pytest.Config) -> None:
    activation = config.stash.get(ACTIVATION, None)
    if activation is not None and activation.session is not None:
        activation.session.release()  # the signal handlers back, the run's locks let go


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "spec_case" not in metafunc.fixturenames:
        return
    params = [
        pytest.param(
            case,
            id=case.id,
            marks=[
                pytest.mark.specbench(**{name: case.axis_values()[name] for name in AXIS_NAMES}),
                pytest.mark.xdist_group(case.block),
            ],
        )
        for case in metafunc.config.stash[ACTIVATION].start(claim_later=True).cases
    ]
    metafunc.parametrize("spec_case", params)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:
    # The controller collects nothing itself: a worker's collection shows whether specbench cases run.
    activation = node.config.stash[ACTIVATION]
    if activation.session is None:
        session = activation.start_if_cases(ids)
        if session is not None:
            session.select(case_id(nodeid) for nodeid in ids)  # this call's SessionHooks came too late for it


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Keep a block's cases on one worker when the user chose no --dist (or loadgroup); else xdist decides."""
    from .xdist import BlockScheduling, wants_block_scheduling

    if not wants_block_scheduling(config):
        return None
    return BlockScheduling(config, log, lambda: _blocks_of_cases(config))


def _blocks_of_cases(config: pytest.Config) -> dict[str, str] | None:
    """Case id -> block once the session has started; None while the plugin is inert."""
    session = config.stash[ACTIVATION].session
    return None if session is None else {case.id: case.block for case in session.cases}


class SessionHooks:
    """Per-session hooks, each handing pytest's data to the SpecbenchSession.

    Rows come from each report's ``user_properties``, which pytest-xdist carries
    from the workers, so the controller sees every finished case either way; they reach the session typed.
    """

    def __init__(self, session: SpecbenchSession, claim=lambda: None) -> None:
        self.session = session
        self.claim = claim  # Activation.claim: the run's files, when started while collecting
        self.unavailable: dict[str, str] = {}  # chosen pairs whose model is missing: their cases fail with this

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.claim()  # here a usage error stops pytest with status 4; inside collection it would be an error of it
        self.session.count_collected("spec_case" in getattr(item, "fixturenames", ()) for item in items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # After -k/-m: only the cases that will run are checked, so no hub probe for the others.
        cases = [case for case in map(_case_of, session.items) if case is not None]
        self.session.select(case.id for case in cases)
        for item in session.items:
            case = _case_of(item)
            if case is None or self.session.replay(case.id) is not None:
                continue  # a resumed case needs no model
            reason = self.session.availability.unavailable_reason(case.pair)
            if reason and self.session.availability.chosen(case.pair):
                self.unavailable[case.pair.name] = reason
            elif reason:
                item.add_marker(pytest.mark.skip(reason=reason))

    def pytest_report_collectionfinish(self) -> list[str]:
        # Said at start too: a resume that replays nothing may be stopped before it runs every case again.
        line = self.session.resume.unmatched_line([case.id for case in self.session.cases])
        return [f"specbench: {line}"] if line else []

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        # The controller collects nothing itself: the workers' collections say what will run.
        self.session.select(case_id(nodeid) for nodeid in ids)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        case = _case_of(item)
        if case is not None and case.pair.name in self.unavailable:
            pytest.fail(self.unavailable[case.pair.name], pytrace=False)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.session.add_report(
            case_id(report.nodeid),
            report.when,
            report.outcome,
            "specbench" in report.keywords,
            reported_result(report.user_properties),
            _skip_reason(report),
        )

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo) -> None:
        # Under CPython 3.11 a frame interrupted by a signal can have no line number, and pytest's
        # report of the interruption then dies with a TypeError (exit status 1, a traceback) after
        # the files were written. Leave such frames out of the report.
        excinfo.traceback = excinfo.traceback.filter(_has_line_number)

    @pytest.hookimpl(tryfirst=True)  # before xdist's own, which waits for busy workers to stop
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if is_worker(session.config):
            return
        failed = self.session.finish(_interruption(session))
        if self.session.signals.received is not None:  # also one held back while the files were written
            session.exitstatus = pytest.ExitCode.INTERRUPTED
        elif failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(trylast=True)  # after pytest-benchmark's table: the specbench summary is read last
    def pytest_terminal_summary(self, terminalreporter, config: pytest.Config) -> None:
        if is_worker(config) or config.option.collectonly:  # nothing ran: no results to sum up, none missing
            return
        for title, lines in self.session.summary_sections():
            terminalreporter.section(title)
            for line, is_error in lines:
                terminalreporter.write_line(line, red=is_error)


def _case_of(item: pytest.Item):
    """The benchmark case an item runs, or None for other tests."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("spec_case") if callspec is not None else None


def _skip_reason(report: pytest.TestReport) -> str | None:
    """The reason of a skipped report (``longrepr`` is ``(path, line, "Skipped: reason")``, a list once xdist
    carried it), or None."""
    if report.outcome != "skipped":
        return None
    longrepr = report.longrepr
    if isinstance(longrepr, (tuple, list)) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr) if longrepr else None


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
