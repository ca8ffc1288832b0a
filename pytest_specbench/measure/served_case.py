"""A case on a served engine: its runs are streamed requests to a server with the case's speculative config, its
baseline requests to the same target served without speculation, and its verdict against the baseline server.

The target is also loaded here, as for every case: its tokenizer makes the input, its ``generate()`` gives the tokens
the served greedy output is set beside (a row field, not the verdict), and its size and costs fill the row as for
the other engines. The engine (its :class:`~.engine.ServedEngine`) starts or reaches the servers and turns each
request into a decode's result, its steps from the server's own counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..engine.stats import GenerationResult
from ..models.base import NotApplicable
from ..served.client import ServedRequestError, Server
from .case_run import BaselineRun, Judgement, NewInterleaved
from .engine import ServedEngine
from .engines import ENGINES, SpeculativeRun
from .sequence import SequenceRun
from .verdicts import divergence_verdict, first_divergence


@dataclass(frozen=True)
class ServedSetup:
    """The two servers of a case, and the baseline server's greedy output with its top-2 margins."""

    speculative: Server
    baseline: Server
    reference: list[int]
    margins: list[float | None]
    server: str  # the row's ``server``: engine, version and the speculative server's arguments


class ServedSequenceRun(SequenceRun):
    """A case of batch 1 on a served engine. The block it is in (:attr:`..cases.matrix.Case.block`) holds every
    prompt of one (target, dtype, pair, k): one speculative server serves them all, then the next block starts the
    next."""

    served: ServedSetup
    shares_block_baseline = False

    def prepare(self) -> None:
        # What the engine cannot run is skipped first, before any server starts (docs/served.md); then a wrong
        # endpoint fails before this case loads.
        config = self.context.config
        refusal = ENGINES[self.case.engine].refusal(self.case, temperature=config.temperature, dtypes=config.dtypes)
        if refusal:
            raise NotApplicable(refusal)
        servers = self.serving.servers(self.case, self.dtype, self.context.config, self.context.store)
        super().prepare()  # the target's input, generate() reference and costs, as for every case
        baseline = servers.baseline
        reference = _naming_server_log(
            baseline, lambda: self.serving.greedy(baseline, self.prompt_ids, self.setup.max_new_tokens)
        )
        self.served = ServedSetup(
            servers.speculative, baseline, reference.token_ids, reference.top2_margins, servers.description
        )

    @property
    def serving(self) -> ServedEngine:
        served = ENGINES[self.case.engine].served
        if served is None:
            raise ValueError(f"the {self.case.engine} engine is not served: its cases run in this process")
        return served

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
        """One timed request; a server that died is :class:`ServerDied`, one that failed the request names its log,
        one that drafts another length than the case's k (an endpoint started with another) is an error."""
        result = _naming_server_log(
            server, lambda: self.serving.request(server, self.prompt_ids, self.setup.max_new_tokens, counted)
        )
        drafted_k = max(result.stats.k_per_step, default=0)
        if counted and drafted_k not in (0, self.case.k):
            raise ServedRequestError(
                f"the server drafts up to {drafted_k} tokens a step (its counters' positions) where the case's k is "
                f"{self.case.k}: start it with the case's draft length\n{server.failure_note}"
            )
        return result

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
