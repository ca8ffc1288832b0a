"""The servers of one run: each configuration started once, and at most two alive: a baseline and a speculative one.

A served engine fixes a server's speculative config (its method and k) when it starts, so a run keeps one server per
configuration for as long as it needs it. Speculative servers take turns (a block runs every prompt of one
configuration before the next block starts the next), so starting one stops the one before. A baseline server (no
speculation) serves every block of its target and dtype, which run back to back; a new one stops every server
before it, so that two servers at most share a GPU's memory (each takes a share of it: measure/served_case.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class StartedServer(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...

    def check_alive(self, when: str = "") -> None: ...


class ServerSpec(Protocol):
    """One server's configuration, as an engine describes it (served/vllm_server.py ``ServerSpec``)."""

    @property
    def identity(self) -> str: ...  # every setting, as one string

    @property
    def speculative(self) -> object | None: ...  # None: the target alone, the baseline

    log_name: str

    def new_server(self, log_path: Path) -> StartedServer: ...


class ServerPool:
    """``pool.server(spec)``: a healthy server for ``spec``, started on first use; :meth:`stop_all` at the end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = Path(log_dir)
        self._servers: dict[str, tuple[ServerSpec, StartedServer]] = {}  # by ServerSpec.identity
        self.starts = 0  # servers started, which numbers their logs

    def server(self, spec: ServerSpec) -> StartedServer:
        """The running server of ``spec``; a speculative ``spec`` stops any other speculative server first."""
        running = self._servers.get(spec.identity)
        if running is not None:
            running[1].check_alive("between requests")
            return running[1]
        if spec.speculative is None:  # another target or dtype: the servers before it are done with
            self.stop_all()
        else:
            for identity in [key for key, (other, _) in self._servers.items() if other.speculative is not None]:
                self._servers.pop(identity)[1].stop()
        server = spec.new_server(self.log_dir / f"{spec.log_name}-{self.starts}.log")
        server.start()
        self.starts += 1
        self._servers[spec.identity] = (spec, server)
        return server

    def stop_all(self) -> None:
        while self._servers:
            self._servers.popitem()[1][1].stop()
