"""The servers of one run: each configuration started once, and at most two alive: a baseline and a speculative one.

vLLM fixes a server's speculative config (its method and k) when it starts, so a run keeps one server per
configuration for as long as it needs it. Speculative servers take turns (a block runs every prompt of one
configuration before the next block starts the next), so starting one stops the one before. A baseline server (no
speculation) serves every block of its target and dtype, which run back to back; a new one stops every server
before it, so that two servers at most share a GPU's memory (each takes a share of it: measure/served_case.py).
"""

from __future__ import annotations

from pathlib import Path

from .vllm_server import ServerSpec, VllmServer


class ServerPool:
    """``pool.server(spec)``: a healthy server for ``spec``, started on first use; :meth:`stop_all` at the end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = Path(log_dir)
        self._servers: dict[str, VllmServer] = {}  # by ServerSpec.identity
        self.starts = 0  # servers started, which numbers their logs

    def server(self, spec: ServerSpec) -> VllmServer:
        """The running server of ``spec``; a speculative ``spec`` stops any other speculative server first."""
        running = self._servers.get(spec.identity)
        if running is not None:
            running.check_alive("between requests")
            return running
        if spec.speculative is None:  # another target or dtype: the servers before it are done with
            self.stop_all()
        else:
            for identity in [key for key, other in self._servers.items() if other.spec.speculative is not None]:
                self._servers.pop(identity).stop()
        server = VllmServer(spec, self.log_dir / f"vllm-{self.starts}.log")
        server.start()
        self.starts += 1
        self._servers[spec.identity] = server
        return server

    def stop_all(self) -> None:
        while self._servers:
            self._servers.popitem()[1].stop()
