"""A server in a process group of its own, healthy before use and stopped on every path: what every served engine's
server shares (served/vllm_server.py, served/llamacpp_server.py give each its command and environment)."""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Protocol

#: what a server may take to answer /health after its start (loading, warm-up; a CPU build compiles kernels)
STARTUP_TIMEOUT_S = 600.0
#: how long a stopped server gets between SIGTERM and SIGKILL
STOP_GRACE_S = 20.0
LOG_TAIL_CHARS = 3000


class ServerDied(RuntimeError):
    """The server exited, or never answered: the message names its log and ends with the log's tail."""


class ProcessSpec(Protocol):
    """What a server process is started from: its command on a port, and the model its messages name."""

    @property
    def served_name(self) -> str: ...

    @property
    def model(self) -> Path: ...

    def command(self, port: int) -> list[str]: ...


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServerProcess:
    """A running server: ``with LlamaServer(spec, log) as server: server.url`` (a subclass). Started in its own
    process group so that stopping it stops the processes it starts too; its output goes to ``log_path``. A
    subclass says what it is (:attr:`kind`), what it needs before it starts (:meth:`check_startable`) and its
    environment (:meth:`environment`)."""

    kind = "server"

    def __init__(
        self, spec: ProcessSpec, log_path: Path, startup_timeout_s: float = STARTUP_TIMEOUT_S, port: int | None = None
    ) -> None:
        self.spec = spec
        self.log_path = Path(log_path)
        self.startup_timeout_s = startup_timeout_s
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen | None = None
        self._group: int | None = None  # the server's process group: its engine processes can outlive it

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start the server and wait until /health answers; :class:`ServerDied` where it exits or times out."""
        self.check_startable()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = self.environment()
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                self.spec.command(self.port),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        self._group = self._process.pid
        _LIVE.add(self)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise

    def check_startable(self) -> None:
        """:class:`ServerDied` where the server cannot be started at all (no program)."""

    def environment(self) -> dict[str, str]:
        """The server's environment: this process's, less what would mislead the server."""
        return dict(os.environ)

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            self.check_alive("while starting")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        raise ServerDied(self._describe(f"did not answer /health within {self.startup_timeout_s:.0f} s"))

    def check_alive(self, when: str = "") -> None:
        """:class:`ServerDied` where the server's process has exited."""
        if self._process is not None and self._process.poll() is not None:
            status = self._process.returncode
            raise ServerDied(self._describe(f"exited with status {status}{' ' + when if when else ''}"))

    @property
    def served_name(self) -> str:
        return self.spec.served_name

    @property
    def failure_note(self) -> str:
        """What an error adds to say where to look."""
        return f"the server's log: {self.log_path}"

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after the grace or on an interruption, and SIGKILL to
        whatever of the group is left once its main process is gone; safe to call twice."""
        process, group = self._process, self._group
        if process is None or group is None:
            return
        try:
            if process.poll() is None:
                _signal_group(group, signal.SIGTERM)
                try:
                    process.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
        finally:  # an interruption during the grace still ends the group
            _signal_group(group, signal.SIGKILL)
            process.wait()
            self._process = self._group = None
            _LIVE.discard(self)

    def _describe(self, what: str) -> str:
        try:
            tail = self.log_path.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            tail = ""
        return f"the {self.kind} for {self.spec.model} {what}; its log: {self.log_path}\n{tail}"


def _signal_group(group: int, sig: int) -> None:
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        pass


#: the servers started and not yet stopped: stopped at the interpreter's exit, whatever ended it short of SIGKILL
_LIVE: set[ServerProcess] = set()


@atexit.register
def _stop_live() -> None:
    for server in list(_LIVE):
        server.stop()
