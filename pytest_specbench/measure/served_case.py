"""A case on a served engine (vLLM): its runs are streamed requests to a server with the case's speculative config,
its baseline requests to the same target served without speculation, and its verdict against the baseline server.

The target is also loaded here, as for every case: its tokenizer makes the input, its ``generate()`` gives the tokens
the served greedy output is set beside (a row field, not the verdict), and its size and costs fill the row as for
the other engines. Counts come from the server's ``vllm:spec_decode_*`` counters, read before and after each run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..engine.stats import DecodeStats, GenerationResult
from ..models.base import NotApplicable
from ..models.loading import model_folder
from ..served.client import ServedRequestError, ServedRun, Server, stream_completion
from ..served.endpoint import connect
from ..served.metrics import SpecCounters, read_spec_counters
from ..served.vllm_server import ServerSpec, installed_version
from .case_run import BaselineRun, Judgement, NewInterleaved
from .drafter_kinds import peer_method
from .engines import ENGINES, SpeculativeRun
from .matrix import Case
from .sequence import SequenceRun
from .verdicts import divergence_verdict, first_divergence

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
    drafter kind declares it (measure/drafter_kinds.py ``PeerMethod.server_config``)."""
    method = peer_method(case.pair, "vllm")
    if isinstance(method, str):
        raise NotApplicable(method)
    if method.server_config is None:
        raise NotApplicable(f"the vllm engine has no mapping for {method.name}")
    return method.server_config(case.pair, case.k, draft_folder)


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


def served_result(prompt_ids: list[int], run: ServedRun, counters: SpecCounters | None) -> GenerationResult:
    """A streamed request as the engines' result: the tokens from the API, prefill as time to first token, and the
    steps from the server's counters over the request (None: no speculation, one token per step).

    The counters give how many verify steps drafted, and how many of those accepted exactly j tokens (from the
    per-position counts: acceptance is a prefix), not their order: the per-step lists hold the prefill, the
    steps that drafted in ascending accepted count, then the steps that did not draft. Drafts accepted past the
    tokens returned are taken off the last of them."""
    n = len(run.token_ids)
    stats = DecodeStats(new_tokens=n, wall_time_s=run.wall_s, prefill_time_s=run.ttft_s)
    steps: list[tuple[int, int]] = [(0, 0)]  # the prefill: drafted, accepted
    k = len(counters.accepted_per_position) if counters is not None else 0
    if counters is not None and counters.drafts:
        per_position = [round(count) for count in counters.accepted_per_position]
        ended = [round(counters.drafts), *per_position, 0]  # drafts that accepted at least j tokens, j = 0..k
        accepted_each = [a for a in range(k + 1) for _ in range(ended[a] - ended[a + 1])]
        steps += list(zip(_drafted(accepted_each, round(counters.draft_tokens), k), accepted_each))
    # Each step commits its accepted tokens and one of the target's. The counters also count drafts accepted past
    # the tokens asked for (the last step's), so those are taken off the steps that accepted most, as the native
    # engine drafts only what the run can still use.
    excess = sum(accepted for _, accepted in steps) + len(steps) - n
    if excess > k:  # more than one step's drafts past the end
        raise ValueError(
            f"the server's counters moved by more than this request: {n} tokens came back, and the counters "
            f"account for {n + excess} (another client on the server?)"
        )
    while excess > 0 and len(steps) > 1:
        drafted, accepted = steps[-1]
        cut = min(excess, accepted + 1)
        steps[-1] = (drafted - min(cut, drafted), accepted - min(cut, accepted))
        if cut > accepted:  # the whole step lies past the end
            steps.pop()
        excess -= cut
    steps += [(0, 0)] * (n - sum(accepted for _, accepted in steps) - len(steps))
    stats.drafted_per_step = [drafted for drafted, _ in steps]
    stats.accepted_per_step = [accepted for _, accepted in steps]
    stats.k_per_step = [0] + [k if drafted else 0 for drafted, _ in steps[1:]]
    stats.target_forward_passes = len(steps)
    stats.drafted_tokens = sum(stats.drafted_per_step)
    stats.accepted_tokens = sum(stats.accepted_per_step)
    stats.bonus_tokens = len(steps)
    sequences = torch.tensor([prompt_ids + run.token_ids], dtype=torch.long)
    return GenerationResult(sequences, len(prompt_ids), stats)


def _drafted(accepted: list[int], total: int, k: int) -> list[int]:
    """Drafted tokens per step, from each step's accepted count and the total drafted (vLLM's proposals may be
    shorter than k): at least what it accepted, and one more where it accepted fewer than k (a rejection, or a
    shorter proposal), the rest spread in order, at most k each, so that they sum to the server's total."""
    drafted = [min(k, a + 1) if a < k else k for a in accepted]
    if sum(drafted) > total:  # proposals shorter than k that were accepted whole: no rejection to count
        drafted = list(accepted)
    left = total - sum(drafted)
    for i, value in enumerate(drafted):
        more = min(left, k - value)
        drafted[i] += more
        left -= more
    return drafted


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


@dataclass(frozen=True)
class ServedSetup:
    """The two servers of a case, and the baseline server's greedy output with its top-2 margins."""

    speculative: Server
    baseline: Server
    reference: list[int]
    margins: list[float | None]
    server: str  # the row's ``server``: engine, version and the speculative server's arguments


class ServedSequenceRun(SequenceRun):
    """A case of batch 1 on a served engine. The block it is in (:attr:`.matrix.Case.block`) holds every prompt of
    one (target, dtype, pair, k): one speculative server serves them all, then the next block starts the next."""

    served: ServedSetup
    shares_block_baseline = False

    def prepare(self) -> None:
        # What the engine cannot run is skipped first, before any server starts (docs/served.md); then a wrong
        # endpoint fails before this case loads.
        refusal = ENGINES[self.case.engine].refusal(self.case, temperature=self.context.config.temperature)
        if refusal:
            raise NotApplicable(refusal)
        speculative, baseline, server = self._servers()
        super().prepare()  # the target's input, generate() reference and costs, as for every case
        reference = _naming_server_log(
            baseline,
            lambda: stream_completion(baseline.url, baseline.served_name, self.prompt_ids, self.setup.max_new_tokens),
        )
        self.served = ServedSetup(speculative, baseline, reference.token_ids, reference.top2_margins, server)

    def _servers(self) -> tuple[Server, Server, str]:
        """The speculative and the baseline server, and the row's ``server``: the endpoints the run was given
        (checked against the case), else servers this run starts."""
        case, config = self.case, self.context.config
        if config.vllm_endpoints:
            urls = dict(config.vllm_endpoints)
            if f"k{case.k}" not in urls:
                raise NotApplicable(
                    f"--specbench-vllm-endpoints names no endpoint for k={case.k} (it names {', '.join(urls)})"
                )
            speculative_config(case, None)  # a pair vLLM has no method for is skipped, as without endpoints
            baseline, speculative = connect(urls["baseline"]), connect(urls[f"k{case.k}"])
            baseline.check_serves(case.pair.target, None)
            speculative.check_serves(case.pair.target, case.k)
            return speculative, baseline, f"{speculative.version}: endpoint {speculative.url} ({speculative.root})"
        python = config.vllm_python
        if python is None:
            raise NotApplicable("the vllm engine needs --specbench-vllm-python (docs/served.md)")
        store = self.context.store
        settings = ServerSettings(python, self.dtype, config.vllm_args, config.cache_dir, store.device)
        started = store.servers().server(baseline_spec(case, settings))
        started_speculative = store.servers().server(server_spec(case, settings))
        arguments = server_arguments(case, started_speculative.spec)
        return started_speculative, started, f"{installed_version(python)}: {arguments}"

    def warm_up_key(self) -> tuple:
        """Each k has its own server, whose first requests pay its start-up costs."""
        return self.case.key("served_warm_up")

    @property
    def costs(self) -> None:
        """None: the cost probe times this package's passes, not the server's, so a served row has no prediction."""
        return None

    @property
    def prompt_ids(self) -> list[int]:
        return self.setup.input_ids[0].tolist()

    def _request(self, server: Server, counted: bool) -> GenerationResult:
        """One timed request; a server that died is :class:`ServerDied`, one that failed the request names its log."""

        def timed() -> tuple[ServedRun, SpecCounters | None]:
            before = read_spec_counters(server.url) if counted else None
            run = stream_completion(
                server.url, server.served_name, self.prompt_ids, self.setup.max_new_tokens, top_logprobs=0
            )
            return run, read_spec_counters(server.url) - before if counted and before is not None else None

        return served_result(self.prompt_ids, *_naming_server_log(server, timed))

    def new_runner(self) -> SpeculativeRun:
        server = self.served.speculative
        return lambda between_steps=None: self._request(server, counted=True)

    def baseline(self) -> BaselineRun:
        return lambda: self._request(self.served.baseline, counted=False)

    def interleaved_baseline(self) -> NewInterleaved | None:
        return None

    def calibrate(self, baseline: BaselineRun, new_interleaved: NewInterleaved | None) -> None:
        """Nothing: the draft's cost is the server's own."""

    @property
    def reference(self) -> list[int]:
        return self.served.reference

    def judge(self, result: GenerationResult) -> Judgement:
        served = self.served
        margins = served.margins
        verdict = divergence_verdict(
            result.token_ids,
            served.reference,
            lambda position: (margins[position] if position < len(margins) else None, None),
            self.setup.target.tokenizer,
            self.half_precision,
            self.context.config.tie_tolerance,
        )
        return Judgement(verdict)

    def row_fields(
        self, last_run: GenerationResult, speed: dict[str, Any], steps: dict[str, Any], other_time_s: float
    ) -> tuple[dict[str, Any], float]:
        """The server, and where the served greedy output first differs from the target's ``generate()`` (None:
        the same tokens): beside the verdict, not part of it."""
        return {
            "server": self.served.server,
            "served_vs_generate": first_divergence(self.served.reference, self.setup.reference),
        }, other_time_s


def _naming_server_log(server: Server, request: Callable[[], Any]) -> Any:
    """``request()``'s answer; a server that died is :class:`ServerDied`, one that failed the request names its
    log (its own error message only says to look there)."""
    try:
        return request()
    except ServedRequestError as error:
        server.check_alive("during a request")
        raise ServedRequestError(f"{error}\n{server.failure_note}") from error
