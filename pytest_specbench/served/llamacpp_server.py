"""llama.cpp's ``llama-server`` on a GGUF file as it was made, healthy before use, stopped on every path; one
streamed ``/completion`` on token ids, timed per token, with the server's own draft counts for the request."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .client import REQUEST_TIMEOUT_S, ServedRequestError, ServedRun, logprob_margin, read_url, stream_tokens
from .process import ServerDied, ServerProcess
from .remote import EndpointMismatch, RemoteServer

#: a server's context where the user's arguments name none: the prompts and new tokens of a run fit in it, and
#: the KV cache of a model's whole context (Gemma 3's is 32k) would take memory the run needs
DEFAULT_CONTEXT = 4096


@dataclass(frozen=True)
class LlamaServerSpec:
    """One server's configuration: the binary, the GGUF file, the threads, and its speculative arguments (None:
    the target alone, the baseline). ``extra_args`` go to ``llama-server`` as given (``-ngl 99``)."""

    binary: Path
    model: Path
    threads: int | None = None
    speculative: tuple[str, ...] | None = None
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # set for the server (CUDA_VISIBLE_DEVICES: the run's GPU)

    #: what its log files are named after
    log_name = "llamacpp"

    def command(self, port: int) -> list[str]:
        """One slot (one client at a time), its counters on /metrics, the run's threads for the target and the
        draft; the user's arguments last, so that theirs win."""
        command = [
            str(self.binary), "-m", str(self.model), "--host", "127.0.0.1", "--port", str(port),
            "--alias", self.served_name, "--parallel", "1", "--metrics", "--no-webui",
        ]  # fmt: skip
        named = set(self.extra_args)
        if not named & {"-c", "--ctx-size"}:
            command += ["-c", str(DEFAULT_CONTEXT)]
        if self.threads is not None:
            command += ["-t", str(self.threads), "-tb", str(self.threads)]
            if self.speculative is not None and "-md" in self.speculative:
                command += ["-td", str(self.threads), "-tbd", str(self.threads)]
        return command + list(self.speculative or ()) + list(self.extra_args)

    @property
    def identity(self) -> str:
        """Every setting, as one string: two specs that start the same server have the same one."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)

    @property
    def served_name(self) -> str:
        return self.model.stem

    def new_server(self, log_path: Path) -> LlamaServer:
        """A server of this spec, not started yet, its output to ``log_path``."""
        return LlamaServer(self, log_path)


class LlamaServer(ServerProcess):
    """A running ``llama-server``."""

    kind = "llama.cpp server"
    spec: LlamaServerSpec

    def environment(self) -> dict[str, str]:
        return {**os.environ, **dict(self.spec.env)}

    def check_startable(self) -> None:
        if not self.spec.binary.is_file():
            raise ServerDied(f"no llama-server at {self.spec.binary} (docs/served.md says how to build one)")


@functools.cache
def installed_version(binary: Path) -> str:
    """``llama.cpp 0.6.0-dev (build 11434, commit ...)``: what ``llama-server --version`` says it was built from
    (scripts/make-llamacpp.sh records its source package there); :class:`ServerDied` where it cannot be run or says
    no version."""
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ServerDied(f"{binary} could not be run to read its version: {error}") from error
    said = f"{done.stdout}\n{done.stderr}"
    found = re.search(r"^version:\s*(.+)$", said, re.MULTILINE)
    if done.returncode != 0 or found is None:
        tail = said.strip()[-500:] or f"exit status {done.returncode}, no output"
        raise ServerDied(f"{binary} says no llama.cpp version: {tail}")
    return f"llama.cpp {found[1].strip()}"


@dataclass
class LlamaRun:
    """A streamed request, and the server's own counts for it: draft tokens proposed and accepted (0 and 0 where
    nothing was drafted)."""

    run: ServedRun
    drafted: int
    accepted: int


def stream_completion(
    url: str, prompt_ids: list[int], max_tokens: int, *, top_probs: int = 2, timeout_s: float = REQUEST_TIMEOUT_S
) -> LlamaRun:
    """Greedy decoding of exactly ``max_tokens`` tokens (end of text ignored, as the native engine's fixed length)
    after ``prompt_ids``, streamed from ``/completion``, its prompt prefilled anew (no cached prompt: each run as the
    first); ``top_probs`` 0 asks for no probabilities. ``timeout_s`` bounds each read, not the whole request."""
    body = {
        "prompt": prompt_ids,
        "n_predict": max_tokens,
        "temperature": 0.0,
        "top_k": 1,
        "ignore_eos": True,
        "stream": True,
        "return_tokens": True,
        "cache_prompt": False,
        "n_probs": top_probs,
    }
    last: list[dict] = []  # the last chunk's timings

    def take(run: ServedRun, chunk: dict, at_s: float) -> bool:
        timings = _take_chunk(run, chunk, at_s, url)
        if timings is not None:
            last.append(timings)
        return bool(chunk.get("stop"))

    run = stream_tokens(url, "/completion", body, take, max_tokens, timeout_s)
    if not last:
        raise ServedRequestError(f"{url} ended its stream without its timings (no draft counts)")
    return LlamaRun(run, int(last[-1].get("draft_n", 0)), int(last[-1].get("draft_n_accepted", 0)))


def _take_chunk(run: ServedRun, chunk: dict, at_s: float, url: str) -> dict | None:
    """The chunk's tokens, arrival and top-2 margins into ``run``; its ``timings`` where it is the last."""
    if "error" in chunk:
        raise ServedRequestError(f"{url} reported an error mid-stream: {chunk['error']}")
    ids = chunk.get("tokens")
    if ids is None:
        raise ServedRequestError(f"{url} returned no token ids (a server without return_tokens?)")
    run.token_ids += ids
    run.arrivals_s += [at_s] * len(ids)
    probabilities = chunk.get("completion_probabilities") or [None] * len(ids)
    if len(probabilities) != len(ids):
        raise ServedRequestError(f"{url} returned {len(probabilities)} probabilities for {len(ids)} tokens")
    run.top2_margins += [
        logprob_margin(top["logprob"] for top in (entry or {}).get("top_logprobs") or []) for entry in probabilities
    ]
    return chunk.get("timings") if chunk.get("stop") else None


@dataclass(frozen=True)
class LlamaEndpoint(RemoteServer):
    """A ``llama-server`` someone else runs, as its /props shows it: the GGUF file it serves, its build, and
    whether it speculates (its draft length does not show: the run takes it on the user's word)."""

    url: str
    model_path: str
    version: str
    speculates: bool

    @property
    def served_name(self) -> str:
        return Path(self.model_path).stem

    def check_serves(self, model: Path, speculates: bool) -> None:
        """:class:`EndpointMismatch` unless it serves the GGUF file named like ``model``, speculating or not."""
        if Path(self.model_path).name != model.name:
            raise EndpointMismatch(
                f"the endpoint {self.url} serves {self.model_path}, not the case's {model.name}; accepted: an "
                f"endpoint started with -m .../{model.name}"
            )
        if self.speculates != speculates:
            serves = "with speculation" if self.speculates else "without speculation"
            wanted = "a speculative one (--spec-type)" if speculates else "one without speculation (a baseline)"
            raise EndpointMismatch(f"the endpoint {self.url} serves {serves}; the case needs {wanted}")


def connect(url: str) -> LlamaEndpoint:
    """The endpoint at ``url`` as its /props and /slots show it: :class:`ServedRequestError` where one cannot be
    read. Whether it speculates is its slots' ``speculative`` (its /props' ``speculative.types`` are a request's
    defaults, ``none`` even on a server started with ``--spec-type``)."""
    url = url.rstrip("/")
    props = read_url(f"{url}/props", json.loads, 30.0)
    slots = read_url(f"{url}/slots", json.loads, 30.0)
    build = str(props.get("build_info", "unknown"))
    speculates = any(bool(slot.get("speculative")) for slot in slots)
    return LlamaEndpoint(url, str(props.get("model_path", "")), f"llama.cpp {build}", speculates)
