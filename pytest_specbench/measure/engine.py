"""An engine as the measuring layer runs it: one speculative run of a case, or a served engine's servers and
requests; and what it cannot run, declared. Each engine is one :class:`Engine` (measure/engines.py lists them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch
from transformers import PreTrainedModel

from ..cases.drafter_kinds import PairSpec, kind_of, kind_refusal
from ..cases.matrix import Case
from ..engine.drafters import Drafter
from ..engine.sampling import SamplingParams
from ..engine.stats import GenerationResult
from ..kernels.verify_forms import KernelForms
from ..models.base import NotApplicable
from ..served.client import ServedRun, Server
from .costs import CostProfile

if TYPE_CHECKING:
    from ..settings.config import SpecbenchConfig
    from .store import ModelStore

SpeculativeRun = Callable[..., GenerationResult]


@dataclass(frozen=True)
class RunInputs:
    """What one case's speculative runs decode: the same for every engine."""

    target_model: PreTrainedModel
    drafter: Drafter
    input_ids: torch.Tensor
    max_new_tokens: int
    eos_token_id: int | None
    costs: CostProfile
    sampling: SamplingParams
    generator: torch.Generator | None = None
    kernels: KernelForms | str = "auto"  # the target's forms (its store's), or a setting for forms of each run
    compile_steps: bool = False
    draft_kernels: KernelForms | str | None = None  # the draft model's forms (its store's); None: the target's setting


@dataclass(frozen=True)
class PeerMethod:
    """The method a peer engine runs a drafter kind with; ``integer_k_only`` where that method has no k schedule."""

    name: str
    integer_k_only: bool = False
    #: a served engine's speculative config for the pair at k (its draft model's folder, where it has one)
    server_config: Callable[[PairSpec, int, Path | None], dict[str, Any]] | None = None


@dataclass(frozen=True)
class ServedServers:
    """A case's two servers, and the row's ``server``: the engine, its version and the speculative server's
    arguments (or the endpoint)."""

    speculative: Server
    baseline: Server
    description: str


class ServedEngine(Protocol):
    """What a served engine provides: its servers for a case, a greedy request with the top-2 margins, a timed
    request as a decode's result (its steps from the server's own counts), and what its servers' fingerprint
    holds."""

    def servers(self, case: Case, dtype: str, config: SpecbenchConfig, store: ModelStore) -> ServedServers: ...

    def greedy(self, server: Server, prompt_ids: list[int], max_new_tokens: int) -> ServedRun: ...

    def request(
        self, server: Server, prompt_ids: list[int], max_new_tokens: int, counted: bool
    ) -> GenerationResult: ...

    def fingerprint(self, case: Case, config: SpecbenchConfig) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class Engine:
    """A decoding engine: how it runs a case, and what it cannot run, declared."""

    name: str
    # One speculative run of a case; None for a served engine, whose case runs request its server.
    runner: Callable[[Case, RunInputs], SpeculativeRun] | None
    # Why it cannot run a batch > 1 (the case is skipped with the reason), or None where it can.
    batch_refusal: str | None = None
    # It is a peer engine: it runs each drafter kind it has a method for (by the kind's name in
    # cases/drafter_kinds.py) by that method, and skips the others with the reason.
    peer: bool = False
    methods: Mapping[str, PeerMethod] = field(default_factory=dict)
    # What else it cannot run in a pair (its drafter and target when loaded), beyond the above.
    pair_refusal: Callable[[Case, Drafter | None, PreTrainedModel | None], str | None] = lambda case, drafter, target: (
        None
    )
    # Why its runs cannot take ``between_steps`` (speculative_generate's), so no baseline runs between their
    # steps (a :mod:`.pairing` reason); None where they can.
    whole_runs: str | None = None
    # Whether its runs keep the model's own forward (transformers' generate), so its baseline must too: a
    # speedup compares equal kernels.
    own_kernels: bool = False
    # Why it runs greedy decoding only (its cases are skipped under sampling), or None where it samples too.
    greedy_only: str | None = None
    # A served engine: its servers and requests (measure/served_case.py runs its cases); None for one that runs
    # in this process.
    served: ServedEngine | None = None
    # Why its model is the same whatever the dtype (a quantised file served as it is): its cases run at the run's
    # first dtype only, not once more per dtype on the same weights. None where the dtype is the model's.
    fixed_weights: str | None = None

    def refusal(
        self,
        case: Case,
        drafter: Drafter | None = None,
        target: PreTrainedModel | None = None,
        temperature: float = 0.0,
        dtypes: tuple[str, ...] = (),
    ) -> str | None:
        """Why this engine cannot run ``case`` (it is skipped with the reason), or None. Without the loaded
        ``drafter`` and ``target`` (before any model loads), only what the case's settings decide; ``dtypes``
        are the run's."""
        why = kind_refusal(case.pair, batch=case.batch, temperature=temperature)
        if why:
            return why
        if self.fixed_weights and dtypes and not case.pair.dtype and case.dtype != dtypes[0]:
            return (
                f"the {self.name} engine {self.fixed_weights}, so its cases run once, at the run's first dtype "
                f"({dtypes[0]}), not again at {case.dtype}"
            )
        if case.batched and self.batch_refusal:
            return self.batch_refusal
        if temperature > 0 and self.greedy_only:
            return self.greedy_only
        if self.peer:
            method = self.method_for(case.pair)
            if isinstance(method, str):
                return method
            if method.integer_k_only and not isinstance(case.k, int):
                return (
                    f"the {self.name} engine's {method.name} has no draft-length schedule, so it runs "
                    f"pair {case.pair.name} at integer k only, not k={case.k}"
                )
        return self.pair_refusal(case, drafter, target)

    def method_for(self, pair: PairSpec) -> PeerMethod | str:
        """The method this peer engine runs the pair's kind with, or why it has none."""
        kind = kind_of(pair)
        return self.methods.get(kind.name, f"{self.name} has no method for {kind.meaning} (pair {pair.name})")

    def server_config(self, case: Case, draft: Path | None) -> dict[str, Any]:
        """This served engine's speculative settings for the case: its pair's method at k (``draft``: the draft
        model's file or folder, where it has one); :class:`NotApplicable` where it has none."""
        method = self.method_for(case.pair)
        if isinstance(method, str):
            raise NotApplicable(method)
        if method.server_config is None:
            raise NotApplicable(f"the {self.name} engine has no mapping for {method.name}")
        return method.server_config(case.pair, case.k, draft)

    def baseline_kernels(self, kernels: KernelForms) -> KernelForms | str:
        """The kernel forms of this engine's greedy baseline, given the target's forms under the run's
        ``--specbench-kernels``: those, or the model's own (``"linear"``) where its runs keep them."""
        return "linear" if self.own_kernels else kernels


def served_engine(
    name: str,
    methods: Mapping[str, PeerMethod],
    ngram_method: str,
    served: ServedEngine,
    fixed_weights: str | None = None,
) -> Engine:
    """A served engine, with what every served engine here shares: a peer engine whose runs keep the server's own
    kernels and run whole (a :mod:`.pairing` reason); one request at a time (no batch > 1), greedy only, one turn,
    and a prompt lookup's ``max_proposal`` refused, which its n-gram method (``ngram_method``) has no counterpart
    of. ``fixed_weights``: :attr:`Engine.fixed_weights`."""
    from .pairing import SERVED_WHOLE_RUNS

    def pair_refusal(case: Case, drafter: Drafter | None, target: PreTrainedModel | None) -> str | None:
        if "max_proposal" in case.pair.options:
            return f"pair {case.pair.name}: {ngram_method} proposes k tokens and has no counterpart of max_proposal"
        if case.prompt.later_turns:
            return f"prompt {case.prompt.id}: a conversation of several turns is not measured on the {name} engine yet"
        return None

    return Engine(
        name,
        None,
        batch_refusal=(
            f"the {name} engine runs one request at a time here: a served batch (concurrent requests) is not "
            "measured yet"
        ),
        peer=True,
        methods=methods,
        pair_refusal=pair_refusal,
        whole_runs=SERVED_WHOLE_RUNS,
        own_kernels=True,
        greedy_only=(
            f"the {name} engine runs greedy decoding only here: its sampled tokens are not checked against the "
            "target's distribution yet (--specbench-temperature=0)"
        ),
        served=served,
        fixed_weights=fixed_weights,
    )
