"""One streamed completion from an OpenAI-compatible server, on token ids, timed per token as it arrives."""

from __future__ import annotations

import http.client
import json
import math
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

REQUEST_TIMEOUT_S = 600.0
Parsed = TypeVar("Parsed")


class Server(Protocol):
    """What a case sends its requests to: a server this run started, or an endpoint someone else runs."""

    @property
    def url(self) -> str: ...

    @property
    def served_name(self) -> str: ...

    @property
    def failure_note(self) -> str: ...

    def check_alive(self, when: str = "") -> None: ...


class ServedRequestError(RuntimeError):
    """The server refused the request or broke the stream; the message names the server and what it said."""


@dataclass
class ServedRun:
    """What one streamed request gave: the new token ids (from the API, never re-tokenised text), when each
    arrived (seconds from the request), and each position's top-2 logprob margin where logprobs came back."""

    token_ids: list[int]
    arrivals_s: list[float]
    wall_s: float
    top2_margins: list[float | None] = field(default_factory=list)

    @property
    def ttft_s(self) -> float:
        return self.arrivals_s[0] if self.arrivals_s else math.nan

    @property
    def decode_s(self) -> float:
        """From the first token to the last: the decode, apart from prefill."""
        return self.arrivals_s[-1] - self.arrivals_s[0] if len(self.arrivals_s) > 1 else 0.0

    @property
    def tpot_s(self) -> float:
        """Time per output token after the first."""
        return self.decode_s / (len(self.token_ids) - 1) if len(self.token_ids) > 1 else math.nan


def stream_completion(
    url: str,
    model: str,
    prompt_ids: list[int],
    max_tokens: int,
    *,
    top_logprobs: int = 2,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> ServedRun:
    """Greedy decoding of exactly ``max_tokens`` tokens (end-of-text ignored, as the native engine's fixed length)
    after ``prompt_ids``, streamed; ``top_logprobs`` 0 asks for none. ``timeout_s`` bounds each read from the
    server, not the whole request."""
    body = {
        "model": model,
        "prompt": prompt_ids,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "return_token_ids": True,
    }
    if top_logprobs:
        body |= {"logprobs": top_logprobs, "return_tokens_as_token_ids": True}

    def take(run: ServedRun, chunk: dict, at_s: float) -> bool:
        _take_chunk(run, chunk, at_s, url)
        return False  # the stream ends with [DONE]

    return stream_tokens(url, "/v1/completions", body, take, max_tokens, timeout_s)


def stream_tokens(
    url: str,
    path: str,
    body: dict[str, Any],
    take: Callable[[ServedRun, dict, float], bool],
    max_tokens: int,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> ServedRun:
    """``body`` posted to ``url`` + ``path``, its server-sent events read as they arrive: ``take(run, event,
    seconds)`` adds an event's tokens to the run and says whether it was the last (``[DONE]`` ends it too).
    :class:`ServedRequestError` where the server refuses, the stream breaks, or other than ``max_tokens`` tokens
    come back; ``timeout_s`` bounds each read, not the whole request."""
    parts = urllib.parse.urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname, parts.port, timeout=timeout_s)
    start = time.perf_counter()
    try:
        connection.request(
            "POST",
            f"{parts.path.rstrip('/')}{path}",
            json.dumps(body),
            {"Content-Type": "application/json", "Accept": "text/event-stream"},
        )
        response = connection.getresponse()
        if response.status != 200:
            raise ServedRequestError(
                f"{url}{path} answered {response.status}: {response.read(2000).decode(errors='replace')}"
            )
        run = ServedRun([], [], 0.0)
        for line in response:
            text = line.decode("utf-8").strip()
            if not text.startswith("data:"):
                continue
            payload = text[5:].strip()
            if payload == "[DONE]" or take(run, json.loads(payload), time.perf_counter() - start):
                break
        run.wall_s = time.perf_counter() - start
    except (OSError, http.client.HTTPException, ValueError) as error:
        raise ServedRequestError(f"the stream from {url} broke: {type(error).__name__}: {error}") from error
    finally:
        connection.close()
    if len(run.token_ids) != max_tokens:
        raise ServedRequestError(f"{url} returned {len(run.token_ids)} tokens where {max_tokens} were asked for")
    return run


def _take_chunk(run: ServedRun, chunk: dict, at_s: float, url: str) -> None:
    if "error" in chunk:
        raise ServedRequestError(f"{url} reported an error mid-stream: {chunk['error']}")
    for choice in chunk.get("choices", []):
        ids = choice.get("token_ids")
        if ids is None:
            raise ServedRequestError(f"{url} returned no token ids (a server without return_token_ids?)")
        run.token_ids += ids
        run.arrivals_s += [at_s] * len(ids)
        tops = (choice.get("logprobs") or {}).get("top_logprobs") or [None] * len(ids)
        if len(tops) != len(ids):
            raise ServedRequestError(f"{url} returned {len(tops)} top logprobs for {len(ids)} tokens in one chunk")
        run.top2_margins += [logprob_margin((top or {}).values()) for top in tops]


def logprob_margin(logprobs: Iterable[float]) -> float | None:
    """The best logprob less the second, among a position's top ones: equal to the logits' top-2 margin (one
    normaliser); None where fewer than two came back."""
    ranked = sorted(logprobs, reverse=True)
    return ranked[0] - ranked[1] if len(ranked) >= 2 else None


def read_url(url: str, parse: Callable[[str], Parsed], timeout_s: float = 30.0) -> Parsed:
    """``parse`` of the page at ``url`` (a server's /metrics, /v1/models); :class:`ServedRequestError` naming the
    page where it cannot be read or parsed."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return parse(response.read().decode("utf-8"))
    except (OSError, ValueError) as error:
        raise ServedRequestError(f"{url} could not be read: {type(error).__name__}: {error}") from error
