"""One case as a block measures it: prepared, warmed up, run, its baseline, its verdict and what its row needs.

:class:`CaseRun` is implemented once for a single sequence (:mod:`.sequence`) and once for a batch
(:mod:`.batches`); :func:`.runner.case_run_for` chooses between them. A block (:func:`.runner.measure_block`)
drives its cases through this interface alone.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..cases.matrix import Case
from ..cases.prompts import Prompt
from ..engine.cost_probe import parameter_count
from ..engine.drafters import Drafter
from ..engine.interleave import InterleavedBaseline
from ..engine.sampling import SamplingParams
from ..engine.stats import GenerationResult
from ..models.loading import LoadedModel
from ..settings.config import SpecbenchConfig
from .costs import CostProfile
from .engines import SpeculativeRun
from .shared import SharedMeasurements
from .store import ModelStore

BaselineRun = Callable[[], GenerationResult]
NewInterleaved = Callable[[], InterleavedBaseline]


@dataclass(frozen=True)
class MeasureContext:
    """What every case of a run measures with: the worker's models, what its cases share, the settings and
    every prompt of the file (batches and padding draw from them)."""

    store: ModelStore
    shared: SharedMeasurements
    config: SpecbenchConfig
    all_prompts: list[Prompt]


class PreparedCase(Protocol):
    """What every prepared case holds, whatever its kind."""

    target: LoadedModel
    drafter: Drafter
    costs: CostProfile
    sampling: SamplingParams


@dataclass(frozen=True)
class Judgement:
    """A run's output judged: the case's verdict, and a multi-turn case's verdict per turn."""

    verdict: dict[str, Any]
    turn_verdicts: list[dict[str, Any]] | None = None


class CaseRun(ABC):
    """A case of a block, prepared when it is made (making it raises ``NotApplicable``, ``ModelUnavailable`` or
    ``UnrunnableCase`` for a case that cannot run); the block then warms it up, times :meth:`run` and has
    :meth:`judge` judge the last run."""

    setup: PreparedCase
    #: the cases of its block decode one input, so one baseline serves them all; False where a block holds several
    #: inputs (a served engine's), and each case's runs pair with its own :meth:`baseline`
    shares_block_baseline: bool = True

    def __init__(self, case: Case, context: MeasureContext) -> None:
        self.case, self.context = case, context
        self._runner: SpeculativeRun | None = None
        self.prepare()

    # --- what the subclasses provide

    @abstractmethod
    def prepare(self) -> None:
        """Set :attr:`setup`: load the pair, tokenise the input, check the context windows, get the reference and
        the costs (called once, by the constructor)."""

    @abstractmethod
    def new_runner(self) -> SpeculativeRun:
        """A speculative run on the current costs, with a freshly seeded generator."""

    @abstractmethod
    def baseline(self) -> BaselineRun:
        """A target-only run to pair with this case's runs (one generator shared by its calls)."""

    def interleaved_baseline(self) -> NewInterleaved | None:
        """A fresh baseline per call that steps between a run's steps; None for a case whose runs cannot take
        one (:attr:`interleave_refusal` says why)."""
        return None

    @property
    @abstractmethod
    def interleave_refusal(self) -> str | None:
        """Why its runs cannot take a baseline between their steps (a :mod:`.pairing` reason), or None."""

    @abstractmethod
    def judge(self, result: GenerationResult) -> Judgement:
        """A run's output judged against the reference(s)."""

    @property
    @abstractmethod
    def input_ids(self) -> torch.Tensor:
        """The case's own prompt, (1, T): the row's prompt tokens."""

    @property
    @abstractmethod
    def reference(self) -> list:
        """What its output must equal: a token list, or a batch's per row."""

    @property
    def batch_prompt_ids(self) -> list[str] | None:
        """Each row's prompt id for a batch; None for a single sequence."""
        return None

    def calibrate(self, baseline: BaselineRun, new_interleaved: NewInterleaved | None) -> None:
        """After its first warm-up: re-time what the probe measured before any run (nothing by default)."""

    def row_fields(
        self, last_run: GenerationResult, speed: dict[str, Any], steps: dict[str, Any], other_time_s: float
    ) -> tuple[dict[str, Any], float]:
        """The row fields its kind adds (a batch's per-row counts), and the median run's other time as its kind
        counts it; none by default."""
        return {}, other_time_s

    def refresh_costs(self) -> None:
        """Read its costs back from what the run shares (a calibration may have replaced them)."""

    # --- what every case does alike

    def start_runs(self) -> None:
        """Begin a series of runs: a fresh speculative runner on the current costs and a reseeded generator."""
        self._runner = self.new_runner()

    def run(self, between_steps: Callable[[float], None] | None = None) -> GenerationResult:
        """One speculative run; ``between_steps`` (interleaving cases only) runs after the prefill and each step."""
        if self._runner is None:
            self.start_runs()
        if between_steps is None:
            return self._runner()
        return self._runner(between_steps=between_steps)

    def warm_up(self, baseline: BaselineRun, new_interleaved: NewInterleaved | None) -> None:
        """Pay first-call costs untimed, once per (pair, dtype, engine, batch) in the run; after that first warm-up,
        let the case re-time its costs (``new_interleaved``: interleave those pairs, where it can)."""
        self.start_runs()
        warmup = self.context.config.warmup
        warmed = self.context.shared.warm_up(
            self.warm_up_key(),
            lambda: [(baseline(), self.run()) for _ in range(warmup)],
        )
        if warmed:
            self.calibrate(baseline, new_interleaved)

    def warm_up_key(self) -> tuple:
        """What one warm-up serves: every case of its (pair, dtype, engine, batch), which run on the same models."""
        return self.case.key("warm_up")

    def sizes(self) -> dict[str, int]:
        """The pair's parameter counts, shared by its cases."""
        model = getattr(self.drafter, "model", None)  # a drafter without a model has no parameters
        return self.context.shared.sizes(
            self.case.key("sizes"),
            lambda: {"target_params": parameter_count(self.target.model), "draft_params": parameter_count(model)},
        )

    @property
    def target(self) -> LoadedModel:
        return self.setup.target

    @property
    def drafter(self) -> Drafter:
        return self.setup.drafter

    @property
    def costs(self) -> CostProfile:
        return self.setup.costs

    @property
    def sampling(self) -> SamplingParams:
        return self.setup.sampling

    @property
    def dtype(self) -> str:
        """The dtype its models run in (:meth:`.store.ModelStore.dtype_for`)."""
        return self.context.store.dtype_for(self.case)

    @property
    def draft_label(self) -> str:
        """What drafts, in words; a drafter computing in another dtype than the case's says in which (the int8 copy
        keeps float32 activations beside a bfloat16 target on a CPU: only token ids cross between the two)."""
        label = self.case.pair.draft_label
        model = getattr(self.drafter, "model", None)  # prompt lookup has none
        computes_in = str(getattr(model, "dtype", "")).removeprefix("torch.")
        return f"{label} ({computes_in} activations)" if model is not None and computes_in != self.dtype else label

    @property
    def half_precision(self) -> bool:
        """Its target runs in a 16-bit dtype: a divergence at a near-tie is a tie-divergence, not a failure."""
        return self.dtype != "float32"
