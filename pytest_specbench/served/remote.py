"""What every served engine's endpoint shares, a server someone else runs: alive while it answers /health, its log
its owner's, and the error where it serves something other than a case asks for."""

from __future__ import annotations

import urllib.error
import urllib.request

from .process import ServerDied

HEALTH_TIMEOUT_S = 30.0


class EndpointMismatch(ValueError):
    """An endpoint serves something other than the case asks for; the message says what it serves and what was
    expected."""


class RemoteServer:
    """A server at :attr:`url` that this run neither started nor stops (an engine's endpoint subclasses it)."""

    url: str

    def check_alive(self, when: str = "") -> None:
        """:class:`~.process.ServerDied` where the endpoint no longer answers /health."""
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=HEALTH_TIMEOUT_S) as response:
                if response.status == 200:
                    return
                status = f"answered /health with {response.status}"
        except (urllib.error.URLError, OSError) as error:
            status = f"does not answer /health ({error})"
        raise ServerDied(f"the endpoint {self.url} {status}{' ' + when if when else ''}")

    @property
    def failure_note(self) -> str:
        """What an error adds to say where to look: an endpoint's log is its owner's."""
        return f"the endpoint {self.url} is run outside this run; its log is wherever its owner keeps it"
