"""The llamacpp engine: llama.cpp's ``llama-server`` on the pair's GGUF files as they were made (quantised, as users
run them on a CPU), started by this run or run by someone else, with the pair's speculative method at k; its steps
from the server's ``llamacpp:spec_decode_*`` counters, read before and after each request and checked against the
request's own draft counts. Declared once (:data:`LLAMACPP_ENGINE`); its settings are
settings/llamacpp_settings.py's.

Its tokens are not the native engine's: the native engine runs the same files de-quantised. Engines are compared by
their speedups over their own baselines, and by each one's own tokens per second, never by their tokens.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..cases.drafter_kinds import PairSpec
from ..cases.matrix import Case
from ..engine.names import DEFAULT_NGRAM_SIZE
from ..engine.stats import GenerationResult
from ..models.base import ModelUnavailable, NotApplicable
from ..models.loading import gguf_file, gguf_quantisation
from ..served.client import ServedRequestError, ServedRun, Server
from ..served.llamacpp_server import LlamaServerSpec, connect, installed_version, stream_completion
from ..served.metrics import LLAMACPP_PREFIX, SpecCounters, read_spec_counters
from ..settings.config import SpecbenchConfig
from .endpoints import case_endpoints, endpoints_fingerprint
from .engine import PeerMethod, ServedServers, served_engine
from .served_steps import served_result

if TYPE_CHECKING:
    from .store import ModelStore

NAME = "llamacpp"
#: how long the counters may lag the end of a request's stream (the server adds a request's counts to /metrics
#: as it releases the request's slot, just after its last chunk)
COUNTERS_WAIT_S = 5.0


def _ngram(pair: PairSpec, k: int, draft: Path | None) -> dict[str, Any]:
    # ngram-simple matches the last N tokens exactly (no shorter fallback, as the native lookup has) and proposes
    # the M tokens that followed the most recent match: N is the pair's longest n-gram, M is k.
    size = pair.options.get("ngram_size", DEFAULT_NGRAM_SIZE)
    if k < size:
        raise NotApplicable(
            f"llama.cpp's ngram-simple proposes nothing where its draft length M (k={k}) is below its n-gram N "
            f"(pair {pair.name}'s ngram_size {size}): it drops a draft shorter than N; run k >= {size}"
        )
    return {
        "--spec-type": "ngram-simple",
        "--spec-ngram-simple-size-n": size,
        "--spec-ngram-simple-size-m": k,
    }


def _draft_model(pair: PairSpec, k: int, draft: Path | None) -> dict[str, Any]:
    # k draft tokens every step, as the native loop drafts at a constant k: no confidence stop, no minimum
    return {
        "--spec-type": "draft-simple",
        "-md": str(draft),
        "--spec-draft-n-max": k,
        "--spec-draft-n-min": 0,
        "--spec-draft-p-min": 0,
    }


#: llama.cpp's method for each drafter kind it runs, by the kind's name (cases/drafter_kinds.py)
LLAMACPP_METHODS: dict[str, PeerMethod] = {
    "model": PeerMethod("draft-simple (-md)", integer_k_only=True, server_config=_draft_model),
    "prompt_lookup": PeerMethod("ngram-simple", integer_k_only=True, server_config=_ngram),
}


def speculative_arguments(case: Case, draft: Path | None) -> tuple[str, ...]:
    """The server's speculative arguments for the case: its pair's method at k, as the engine declares it."""
    return tuple(str(part) for item in LLAMACPP_ENGINE.server_config(case, draft).items() for part in item)


def _gguf(source: str, config: SpecbenchConfig) -> Path:
    try:
        return gguf_file(source, cache_dir=config.cache_dir)
    except ModelUnavailable as error:  # the model layer's reason, as the case's skip
        raise NotApplicable(f"the llamacpp engine cannot serve {source}: {error}") from None


class LlamaServing:
    """The llamacpp engine's servers and requests (:class:`~.engine.ServedEngine`)."""

    def servers(self, case: Case, dtype: str, config: SpecbenchConfig, store: ModelStore) -> ServedServers:
        """The endpoints the run was given (checked against the case), else servers this run starts."""
        target = _gguf(case.pair.target, config)
        draft = _gguf(case.pair.draft, config) if case.pair.draft else None
        arguments = speculative_arguments(case, draft)
        weights = f"GGUF {gguf_quantisation(target)} as shipped (the native engine runs it de-quantised)"
        if config.llamacpp_endpoints:
            baseline_url, speculative_url = case_endpoints(config.llamacpp_endpoints, case, "llamacpp-endpoints")
            baseline, speculative = connect(baseline_url), connect(speculative_url)
            baseline.check_serves(target, speculates=False)
            speculative.check_serves(target, speculates=True)
            return ServedServers(speculative, baseline, f"{speculative.version}: endpoint {speculative.url}; {weights}")
        binary = config.llamacpp_server
        if binary is None:
            raise NotApplicable("the llamacpp engine needs --specbench-llamacpp-server (docs/served.md)")
        threads = torch.get_num_threads() if store.device == "cpu" else None
        env = _gpu_environment(store.device, config.llamacpp_args)
        spec = LlamaServerSpec(binary, target, threads, arguments, config.llamacpp_args, env)
        baseline = store.servers().server(LlamaServerSpec(binary, target, threads, None, config.llamacpp_args, env))
        speculative = store.servers().server(spec)
        shown = " ".join(part if part != str(draft) else case.pair.draft or part for part in arguments)
        described = f"-m {case.pair.target} {shown} {' '.join(config.llamacpp_args)}".strip()
        return ServedServers(speculative, baseline, f"{installed_version(binary)}: {described}; {weights}")

    def greedy(self, server: Server, prompt_ids: list[int], max_new_tokens: int) -> ServedRun:
        return stream_completion(server.url, prompt_ids, max_new_tokens).run

    def request(self, server: Server, prompt_ids: list[int], max_new_tokens: int, counted: bool) -> GenerationResult:
        if not counted:
            return served_result(
                prompt_ids, stream_completion(server.url, prompt_ids, max_new_tokens, top_probs=0).run, None
            )
        before = _counters(server.url)
        done = stream_completion(server.url, prompt_ids, max_new_tokens, top_probs=0)
        return served_result(prompt_ids, done.run, _request_counters(server.url, before, done.drafted, done.accepted))

    def fingerprint(self, case: Case, config: SpecbenchConfig) -> dict[str, Any] | None:
        """Servers someone else runs: the case's, by URL; servers this run starts: llama.cpp's build and the
        arguments."""
        if config.llamacpp_endpoints:
            return endpoints_fingerprint(config.llamacpp_endpoints, case)
        if config.llamacpp_server is not None:
            return {"llama.cpp": installed_version(config.llamacpp_server), "args": list(config.llamacpp_args)}
        return None


#: llama-server's arguments that choose its GPUs themselves
_DEVICE_ARGS = {"-dev", "--device", "-sm", "--split-mode", "-ts", "--tensor-split", "-mg", "--main-gpu"}


def _gpu_environment(device: str, args: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The server's one GPU, the run's (``CUDA_VISIBLE_DEVICES``), unless its arguments or the environment
    choose the GPUs; nothing on a CPU."""
    parsed = torch.device(device)
    if parsed.type != "cuda" or set(args) & _DEVICE_ARGS or "CUDA_VISIBLE_DEVICES" in os.environ:
        return ()
    return (("CUDA_VISIBLE_DEVICES", str(parsed.index or 0)),)


def _counters(url: str) -> SpecCounters:
    """The server's counters; all zero before its first speculative request (llama.cpp shows none until then)."""
    return read_spec_counters(url, prefix=LLAMACPP_PREFIX) or SpecCounters(0.0, 0.0, 0.0, ())


def _request_counters(url: str, before: SpecCounters, drafted: int, accepted: int) -> SpecCounters:
    """The counters' change over one request, once it holds the request's own draft counts (its response's
    ``draft_n`` and ``draft_n_accepted``): :class:`ServedRequestError` where they never agree."""
    deadline = time.monotonic() + COUNTERS_WAIT_S
    while True:
        change = _counters(url) - before
        if round(change.draft_tokens) == drafted and round(change.accepted_tokens) == accepted:
            return change
        if time.monotonic() > deadline:
            raise ServedRequestError(
                f"{url}'s counters moved by {change.draft_tokens:g} drafted and {change.accepted_tokens:g} accepted "
                f"tokens over a request that said {drafted} and {accepted} (another client on the server?)"
            )
        time.sleep(0.01)


LLAMACPP_ENGINE = served_engine(
    NAME,
    LLAMACPP_METHODS,
    "llama.cpp's ngram-simple",
    LlamaServing(),
    fixed_weights="serves the GGUF file's own quantisation whatever the dtype",
)
