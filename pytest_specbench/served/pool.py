"""The servers of one run: each configuration started once, and one speculative server alive at a time.

vLLM fixes a server's speculative config (its method and k) when it starts, so a run keeps one server per
configuration for as long as it needs it. Speculative servers take turns (a block runs every prompt of one
configuration before the next block starts the next), so starting one stops the one before; the baseline servers
(no speculation) stay up for the whole run, since every block pairs its runs with one.
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
        if spec.speculative is not None:
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
