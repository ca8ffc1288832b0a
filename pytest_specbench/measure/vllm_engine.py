"""The vllm engine: a vLLM server in its own environment, started by this run or run by someone else, with the
pair's speculative method at k; its steps from the server's ``vllm:spec_decode_*`` counters, read before and after
each request. Declared once (:data:`VLLM_ENGINE`); its settings are settings/vllm_settings.py's."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..cases.drafter_kinds import PairSpec
from ..cases.matrix import Case
from ..engine.names import DEFAULT_NGRAM_SIZE
from ..engine.stats import GenerationResult
from ..models.base import NotApplicable
from ..models.loading import model_folder
from ..served.client import ServedRun, Server, stream_completion
from ..served.endpoint import connect
from ..served.metrics import read_spec_counters
from ..served.vllm_server import ServerSpec, installed_version
from ..settings.config import SpecbenchConfig
from .endpoints import case_endpoints, endpoints_fingerprint
from .engine import PeerMethod, ServedServers, served_engine
from .served_steps import served_result

if TYPE_CHECKING:
    from .store import ModelStore


NAME = "vllm"

#: a server's context length where ``--specbench-vllm-args`` names none
DEFAULT_MAX_MODEL_LEN = 4096
#: a CPU server's KV cache (GiB) where VLLM_CPU_KVCACHE_SPACE is not set: vLLM's own choice takes most of the
#: machine's memory, and a baseline server runs beside each speculative one
CPU_KV_CACHE_GIB = 1
#: a GPU server's share of the GPU's memory where ``--specbench-vllm-args`` names none: vLLM's own (0.9) leaves no
#: room for the baseline server that runs beside each speculative one
GPU_MEMORY_UTILIZATION = 0.4
#: arguments with which the user spreads a server over several GPUs: the device is then theirs to choose
_PARALLEL_ARGS = ("--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp")


def speculative_config(case: Case, draft_folder: Path | None) -> dict[str, Any]:
    """vLLM's ``speculative_config`` for the case: its pair's method at k (``num_speculative_tokens``), as the
    engine declares it for the pair's kind (:data:`VLLM_METHODS`)."""
    return VLLM_ENGINE.server_config(case, draft_folder)


@dataclass(frozen=True)
class ServerSettings:
    """What every server of a run shares: vLLM's environment, the dtype, the user's arguments, the model cache and
    the run's device (``--specbench-gpu``)."""

    python: Path
    dtype: str
    args: tuple[str, ...]
    cache_dir: Path | None
    device: str = "cpu"


def server_spec(case: Case, settings: ServerSettings) -> ServerSpec:
    """The server of the case's runs: its target with its pair's method at k."""
    pair = case.pair
    draft = model_folder(pair.draft, cache_dir=settings.cache_dir) if pair.draft else None
    return _spec(pair.target, pair.revision, settings, speculative_config(case, draft))


def baseline_spec(case: Case, settings: ServerSettings) -> ServerSpec:
    """The case's target served without speculation: its baseline."""
    return _spec(case.pair.target, case.pair.revision, settings, None)


def _spec(
    source: str, revision: str | None, settings: ServerSettings, speculative: dict[str, Any] | None
) -> ServerSpec:
    args, env = settings.args, ()
    named = {arg.split("=", 1)[0] for arg in args}
    device = torch.device(settings.device)
    if device.type == "cuda":
        if "--gpu-memory-utilization" not in named:
            args += ("--gpu-memory-utilization", str(GPU_MEMORY_UTILIZATION))
        if not named & set(_PARALLEL_ARGS) and "CUDA_VISIBLE_DEVICES" not in os.environ:
            env = (("CUDA_VISIBLE_DEVICES", str(device.index or 0)),)  # the server's one GPU: the run's
    on_cpu_default = None if device.type == "cuda" or os.environ.get("VLLM_CPU_KVCACHE_SPACE") else CPU_KV_CACHE_GIB
    return ServerSpec(
        python=settings.python,
        model=model_folder(source, revision=revision, cache_dir=settings.cache_dir),
        dtype=settings.dtype,
        speculative=speculative,
        extra_args=args,
        max_model_len=None if "--max-model-len" in named else DEFAULT_MAX_MODEL_LEN,
        cpu_kv_cache_gib=on_cpu_default,
        env=env,
    )


def server_arguments(case: Case, spec: ServerSpec) -> str:
    """The speculative server's arguments as a row records them: the models by their sources, not by the folders
    of this machine's cache, and no port."""
    parts = [f"--dtype {spec.dtype}"]
    if spec.max_model_len is not None:
        parts.append(f"--max-model-len {spec.max_model_len}")
    if spec.speculative is not None:
        config = dict(spec.speculative)
        if "model" in config:
            config["model"] = case.pair.draft
        parts.append(f"--speculative-config {json.dumps(config, sort_keys=True)}")
    return " ".join([f"--model {case.pair.target}", *parts, *spec.extra_args])


class VllmServing:
    """The vllm engine's servers and requests (:class:`~.engine.ServedEngine`)."""

    def servers(self, case: Case, dtype: str, config: SpecbenchConfig, store: ModelStore) -> ServedServers:
        """The endpoints the run was given (checked against the case), else servers this run starts."""
        if config.vllm_endpoints:
            baseline_url, speculative_url = case_endpoints(config.vllm_endpoints, case, "vllm-endpoints")
            speculative_config(case, None)  # a pair vLLM has no method for is skipped, as without endpoints
            baseline, speculative = connect(baseline_url), connect(speculative_url)
            baseline.check_serves(case.pair.target, None)
            speculative.check_serves(case.pair.target, case.k)
            return ServedServers(
                speculative, baseline, f"{speculative.version}: endpoint {speculative.url} ({speculative.root})"
            )
        python = config.vllm_python
        if python is None:
            raise NotApplicable("the vllm engine needs --specbench-vllm-python (docs/served.md)")
        settings = ServerSettings(python, dtype, config.vllm_args, config.cache_dir, store.device)
        baseline = store.servers().server(baseline_spec(case, settings))
        spec = server_spec(case, settings)
        speculative = store.servers().server(spec)
        return ServedServers(speculative, baseline, f"{installed_version(python)}: {server_arguments(case, spec)}")

    def greedy(self, server: Server, prompt_ids: list[int], max_new_tokens: int) -> ServedRun:
        return stream_completion(server.url, server.served_name, prompt_ids, max_new_tokens)

    def request(self, server: Server, prompt_ids: list[int], max_new_tokens: int, counted: bool) -> GenerationResult:
        before = read_spec_counters(server.url) if counted else None
        run = stream_completion(server.url, server.served_name, prompt_ids, max_new_tokens, top_logprobs=0)
        counters = read_spec_counters(server.url) - before if counted and before is not None else None
        return served_result(prompt_ids, run, counters)

    def fingerprint(self, case: Case, config: SpecbenchConfig) -> dict[str, Any] | None:
        """Servers someone else runs: the case's, by URL; servers this run starts: vLLM's version and arguments."""
        if config.vllm_endpoints:
            return endpoints_fingerprint(config.vllm_endpoints, case)
        if config.vllm_python is not None:
            return {"vllm": installed_version(config.vllm_python), "args": list(config.vllm_args)}
        return None


#: vLLM's speculative methods by the names its ``speculative_config`` takes
VLLM_DRAFT_MODEL, VLLM_NGRAM = "draft_model", "ngram"


def _ngram(pair: PairSpec, k: int, draft_folder: Path | None) -> dict[str, Any]:
    # The native lookup tries the longest n-gram first, down to one token.
    longest = pair.options.get("ngram_size", DEFAULT_NGRAM_SIZE)
    return {"method": VLLM_NGRAM, "num_speculative_tokens": k, "prompt_lookup_max": longest, "prompt_lookup_min": 1}


def _draft_model(pair: PairSpec, k: int, draft_folder: Path | None) -> dict[str, Any]:
    return {"method": VLLM_DRAFT_MODEL, "model": str(draft_folder), "num_speculative_tokens": k}


#: vLLM's method for each drafter kind it runs, by the kind's name (cases/drafter_kinds.py)
VLLM_METHODS: dict[str, PeerMethod] = {
    "model": PeerMethod(VLLM_DRAFT_MODEL, integer_k_only=True, server_config=_draft_model),
    "prompt_lookup": PeerMethod(VLLM_NGRAM, integer_k_only=True, server_config=_ngram),
}

VLLM_ENGINE = served_engine(NAME, VLLM_METHODS, "vLLM's ngram", VllmServing())
