"""SIGTERM and SIGINT end a benchmark run the way Ctrl-C ends a pytest run: cleanly.

SIGTERM (what CI timeouts and cancellations send) would kill the process and lose every finished case held in
memory; here it raises :class:`Terminated`, a KeyboardInterrupt, so pytest runs ``pytest_sessionfinish`` (the
files and the summary are written from what finished) and exits with status 2. While a result is being recorded
the interruption waits, so no row is half recorded. Only the first signal interrupts; later ones (a CI runner that
signals twice, Ctrl-C again), and any from the start of the run's files until pytest unconfigures, are noted, not
raised, so they cannot break the report or cut the files short. Installed on the controller only; xdist workers
keep the defaults. What a user sees: docs/measuring.md, "Nothing lost: the results log and resume".
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from typing import Any

HANDLED = (signal.SIGTERM, signal.SIGINT)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as an interruption so that pytest ends the session cleanly."""


class SignalStop:
    """Turns SIGTERM and SIGINT into an interruption, held back while a result is being recorded."""

    def __init__(self, active: bool = True) -> None:
        self.active = active  # False on an xdist worker: the defaults stay
        self.received: str | None = None  # the first signal's name
        self._previous: dict[int, Any] = {}
        self._holding = 0
        self._pending: str | None = None
        self._finishing = False

    def install(self) -> None:
        """Take over the signals (main thread only; elsewhere Python refuses, and the defaults stay)."""
        if self._previous or not self.active:
            return
        try:
            for signum in HANDLED:
                self._previous[signum] = signal.signal(signum, self._handle)
        except ValueError:  # not the main thread
            self.restore()

    def restore(self) -> None:
        """Put back the handlers found at :meth:`install`."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.received is not None:  # the run is already ending: a second interruption would only break that
            self._note(f"{name} again: the run is already ending with the cases that finished")
            return
        self.received = name
        if self._finishing:
            return  # the files are being written from what finished: let that complete
        if self._holding:
            self._pending = name
            return
        self._interrupt(name)

    @staticmethod
    def _note(text: str) -> None:
        try:
            os.write(2, f"\npytest-specbench: {text}\n".encode())
        except OSError:
            pass

    @staticmethod
    def _interrupt(name: str) -> None:
        if name == "SIGINT":
            raise KeyboardInterrupt
        raise Terminated(f"received {name}; the run ends with the cases that finished")

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Record a result whole: a signal arriving meanwhile interrupts right after."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            if not self._holding and self._pending and not self._finishing:
                name, self._pending = self._pending, None
                self._interrupt(name)

    @contextlib.contextmanager
    def finishing(self) -> Iterator[None]:
        """Write the files: from here on signals are noted, not raised, through the summary, until
        :meth:`restore` (at pytest's unconfigure) puts the original handlers back."""
        self._finishing = True
        yield
