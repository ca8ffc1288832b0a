"""When the plugin wakes: only once a ``--specbench-*`` option (or ini key) is given or a specbench case is
collected. Until then it has built, probed, written and switched nothing, so a project that merely has the
plugin installed sees no difference.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable

import pytest

from ..settings.config import ConfigError, check_cache_dir, check_files, cuda_available, parse_settings, read_settings
from .session import SpecbenchSession
from .session_inputs import build_session


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def case_id(nodeid: str) -> str:
    """The parameter id of a node id: ``test_speculative_decoding[tiny-k4-natural]`` -> ``tiny-k4-natural``."""
    return nodeid.partition("[")[2].partition("]")[0]


class Activation:
    """Builds the one :class:`SpecbenchSession` of this pytest run when it is first needed, and says whether it was.

    ``on_start`` runs once, right after the session is built (the plugin registers its session hooks there).
    """

    def __init__(self, config: pytest.Config, on_start: Callable[[SpecbenchSession], None]) -> None:
        self._config = config
        self._on_start = on_start
        self._settings = read_settings(config.getoption, config.getini)
        self.session: SpecbenchSession | None = None
        self._claim_pending = False  # the run's files are still to be claimed (locked, checked): see claim

    @property
    def asked(self) -> bool:
        """A specbench option was given on the command line or in the ini file."""
        return bool(self._settings)

    def start(self, claim_later: bool = False) -> SpecbenchSession:
        """The session, built and checked on first call; a bad setting is a usage error naming it.

        ``claim_later``: started while collecting (no option given, a case collected), where pytest would turn a
        usage error into a collection error; the run's files are then claimed once collection is done
        (:meth:`claim`), still before any case runs.
        """
        if self.session is None:
            self.session = self._build(check_outputs=not is_worker(self._config), claim=not claim_later)
            self._on_start(self.session)
        return self.session

    def claim(self) -> None:
        """Claim the run's files if :meth:`start` left it for later: a usage error when another run holds them
        or they hold an unfinished run's log."""
        session = self.session
        if session is not None and self._claim_pending:
            self._claim_pending = False
            try:
                session.files.claim()
            except ValueError as error:
                raise pytest.UsageError(f"pytest-specbench: {error}") from None

    def _build(self, check_outputs: bool, claim: bool = True) -> SpecbenchSession:
        from ..settings.devices import check_devices

        config = self._config
        try:
            settings = parse_settings(self._settings, cuda_available)
            check_devices(settings.devices)
            session = build_session(
                settings,
                config.rootpath,
                controller=not is_worker(config),
                command=shlex.join(["pytest", *map(str, config.invocation_params.args)]),
            )
            if check_outputs:
                check_files(settings)
                check_cache_dir(settings, (source for pair in session.pairs for source in pair.sources()))
                if config.option.collectonly:
                    pass  # --collect-only writes nothing: it locks nothing either
                elif claim:
                    session.files.claim()  # the run's locks; an unfinished run's log is never replaced
                else:
                    self._claim_pending = True
        except (ConfigError, ValueError) as error:
            raise pytest.UsageError(f"pytest-specbench: {error}") from None
        return session

    def start_if_cases(self, nodeids: Iterable[str]) -> SpecbenchSession | None:
        """On the xdist controller, which collects nothing itself: start when the workers collected a case.

        The matrix is built without side effects to recognise the cases; only a match starts the session.
        """
        if self.session is None:
            try:
                matrix = {case.id for case in self._build(check_outputs=False).cases}
            except pytest.UsageError:
                return None  # the workers report the bad setting as they collect
            if not matrix.intersection(map(case_id, nodeids)):
                return None
        return self.start()


#: where the run's Activation lives on pytest's config
ACTIVATION = pytest.StashKey[Activation]()
