"""The fixtures a benchmark test uses: ``spec_case`` (parametrised by the plugin) with ``specbench``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from ..results.schema import CaseResult
from .activation import ACTIVATION
from .session import SpecbenchSession

#: the user-property name under which a case's result row travels in its test report, as ``to_row()`` gives it
RESULT_KEY = "specbench_result"


def session_of(config: pytest.Config) -> SpecbenchSession:
    """The run's specbench session, started now if no option or case has started it yet."""
    return config.stash[ACTIVATION].start()


def reported_result(user_properties: Sequence[tuple[str, Any]]) -> CaseResult | None:
    """The result row a test report carries (from this process or, through pytest-xdist, a worker), typed."""
    for name, value in user_properties:
        if name == RESULT_KEY:
            return CaseResult.from_row(value)
    return None


def worker(config: pytest.Config) -> tuple[str | None, int]:
    """This process's xdist worker id ("gw0", ...; None outside xdist) and the number of workers."""
    workerinput = getattr(config, "workerinput", {})
    return workerinput.get("workerid"), workerinput.get("workercount", 1)


@pytest.fixture(scope="session")
def specbench_config(request: pytest.FixtureRequest):
    """The session's validated SpecbenchConfig."""
    return session_of(request.config).config


@pytest.fixture(scope="session")
def specbench_store(request: pytest.FixtureRequest):
    """Models loaded once per device for the whole session (one store per xdist worker)."""
    from ..measure.store import ModelStore
    from ..settings.devices import resolve_device, set_cpu_threads

    config = session_of(request.config).config
    worker_id, worker_count = worker(request.config)
    device = resolve_device(config.devices, int(worker_id.removeprefix("gw")) if worker_id else 0)
    set_cpu_threads(config.threads, device, worker_count)
    store = ModelStore(device, cache_dir=config.cache_dir)  # each case names its dtype
    yield store
    store.close()  # a served engine's servers


@pytest.fixture(scope="session")
def specbench_shared():
    """What this worker measures once and shares between cases (inputs, costs, warm-ups, shared baselines)."""
    from ..measure.shared import SharedMeasurements

    return SharedMeasurements()


@pytest.fixture(scope="session")
def specbench_blocks(request: pytest.FixtureRequest):
    """The blocks this worker has timed, and the run's budget over them."""
    from .block_runs import BlockRuns
    from .xdist import wants_block_scheduling

    config = request.config
    # A worker times whole blocks only under the block scheduler; another one may hand a block's cases to others.
    whole = worker(config)[0] is None or wants_block_scheduling(config)
    return BlockRuns(session_of(config), worker(config), _estimate_printer(config), whole_blocks=whole)


def _estimate_printer(config: pytest.Config):
    """Writes the run's estimate to the terminal (on the controller; xdist workers have none)."""
    if worker(config)[0] is not None:
        return None
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return None

    def write(line: str) -> None:
        if capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(line)
        else:
            reporter.write_line(line)

    return write


class CaseFixture:
    """What a benchmark test uses: ``result = specbench.run(spec_case)``, then ``specbench.assert_lossless(result)``."""

    def __init__(self, request: pytest.FixtureRequest, store, shared, blocks) -> None:
        self._request = request
        self._store = store
        self._shared = shared
        self._blocks = blocks
        self._session = session_of(request.config)

    def _benchmark(self):
        """pytest-benchmark's fixture when it is on; requesting it while off only earns a warning."""
        session = getattr(self._request.config, "_benchmarksession", None)
        if session is None or session.disabled or session.skip:
            return None
        return self._request.getfixturevalue("benchmark")

    def run(self, case) -> CaseResult:
        """Measure the case (its whole block, the first time one of its cases runs) and record its result row."""
        from ..measure.case_inputs import case_inputs
        from ..measure.row import build_result
        from ..models.base import ModelUnavailable, NotApplicable, UnrunnableCase
        from ..results.schema import extra_info_fields
        from ..served.client import ServedRequestError
        from ..served.remote import EndpointMismatch
        from ..served.vllm_server import ServerDied

        replayed = self._session.replay(case.id)
        if replayed is not None:  # finished in the run being resumed: its row again, nothing measured
            self._request.node.user_properties.append((RESULT_KEY, replayed.to_row()))
            return replayed
        benchmark = self._benchmark()
        try:
            measurement = self._blocks.measurement(case, self._store, self._shared)
        except ModelUnavailable as error:
            if not self._session.availability.chosen(case.pair):
                pytest.skip(str(error))
            raise pytest.fail.Exception(f"{case.pair.name}: {error}", pytrace=False) from None
        except NotApplicable as error:
            pytest.skip(str(error))
        except (UnrunnableCase, ServedRequestError, EndpointMismatch, ServerDied) as error:
            # The message says what to change, or names the server, its URL or its log; a chained traceback into
            # torch or urllib would only hide it.
            raise pytest.fail.Exception(str(error), pytrace=False) from None
        result = build_result(
            case, measurement, self._store.device, self._store.dtype_for(case), self._session.config.ci_target
        )
        # Which worker ran it and what its store had loaded so far: shows models load once per worker.
        result.worker = worker(self._request.config)[0] or "main"
        result.model_loads = dict(self._store.load_counts)
        # What it measured from, so that a resumed run replays this row only for the same models and prompt.
        result.inputs_fingerprint = case_inputs(case, self._session.config, self._session.prompts)
        if benchmark is not None:
            _record_in_pytest_benchmark(benchmark, [run.stats.wall_time_s for run in measurement.speculative])
            benchmark.extra_info.update({name: getattr(result, name) for name in extra_info_fields()})
        self._request.node.user_properties.append((RESULT_KEY, result.to_row()))  # plain types: xdist carries it
        return result

    def assert_lossless(self, result: CaseResult) -> None:
        from ..measure.verdicts import divergence_message

        if result.verdict == "diverged":
            message = divergence_message(result.case, result.to_row(), self._session.config.tie_tolerance)
            pytest.fail(message, pytrace=False)


def _record_in_pytest_benchmark(benchmark, wall_times_s: list[float]) -> None:
    """Hand pytest-benchmark the case's timed speculative runs (from its block's rounds) as its rounds.

    The runs were timed when the block ran, inside the first of its cases, so they cannot go through
    ``benchmark.pedantic`` of each case's own test; its statistics object takes them one by one instead.
    """
    stats = benchmark._make_stats(1)
    for seconds in wall_times_s:
        stats.update(seconds)
    benchmark._mode = "pytest-specbench blocked rounds"  # marks the fixture used: no "not used" warning


@pytest.fixture
def specbench(request: pytest.FixtureRequest, specbench_store, specbench_shared, specbench_blocks) -> CaseFixture:
    """Runs a ``spec_case`` and records its result."""
    return CaseFixture(request, specbench_store, specbench_shared, specbench_blocks)
