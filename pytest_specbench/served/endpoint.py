"""A vLLM server someone else runs, reached at its URL: what it serves and how it speculates, read and checked
before any of it is measured.

A run cannot see an endpoint's command line, so it checks what the server shows: the model it lists at /v1/models,
and its speculative-decoding counters on /metrics, which vLLM labels with every draft position from its start
(so their count is its ``num_speculative_tokens``, and a server without speculation has none). Its method (n-gram
or a draft model) does not show there: the run takes it on the user's word, and the row records the endpoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .client import read_url
from .metrics import read_spec_counters
from .remote import EndpointMismatch, RemoteServer

__all__ = ["Endpoint", "EndpointMismatch", "connect"]

TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Endpoint(RemoteServer):
    """A running server at ``url``: the one model it serves (``served_name``, and ``root``, the weights it loaded),
    its vLLM version, and its draft length (None: it does not speculate)."""

    url: str
    served_name: str
    root: str
    version: str
    k: int | None

    def check_serves(self, target: str, k: int | None) -> None:
        """:class:`EndpointMismatch` unless the endpoint serves ``target`` with draft length ``k`` (None: without
        speculation). The target's name is its source's last part, without ``embedded:`` or an organisation; the
        served model's name or its weights' folder must be that name, case aside (``gpt2`` is not ``gpt2-xl``)."""
        name = _last_part(target.split(":", 1)[-1])
        if name not in (_last_part(self.served_name), _last_part(self.root)):
            raise EndpointMismatch(
                f"the endpoint {self.url} serves {self.served_name} (weights {self.root}), not the case's target "
                f"{target}; accepted: an endpoint whose served model name or weights folder is {name!r}"
            )
        if self.k != k:
            serves = "without speculation" if self.k is None else f"with {self.k} speculative tokens"
            wanted = "without speculation (a baseline)" if k is None else f"with k={k} speculative tokens"
            raise EndpointMismatch(f"the endpoint {self.url} serves {serves}; the case needs one {wanted}")


def _last_part(source: str) -> str:
    return source.rstrip("/").rsplit("/", 1)[-1].lower()


def connect(url: str) -> Endpoint:
    """The endpoint at ``url`` as its /v1/models, /version and /metrics show it: :class:`~.client.ServedRequestError`
    where one cannot be read, :class:`EndpointMismatch` where it serves other than one model."""
    url = url.rstrip("/")
    models = read_url(f"{url}/v1/models", json.loads, TIMEOUT_S).get("data", [])
    if len(models) != 1:
        names = ", ".join(str(entry.get("id")) for entry in models) or "no model"
        raise EndpointMismatch(f"the endpoint {url} serves {names}; accepted: an endpoint that serves one model")
    model = models[0]
    version = read_url(f"{url}/version", json.loads, TIMEOUT_S).get("version", "unknown")
    counters = read_spec_counters(url, TIMEOUT_S)
    k = len(counters.accepted_per_position) if counters is not None else None
    return Endpoint(url, str(model["id"]), str(model.get("root") or model["id"]), f"vllm {version}", k)
