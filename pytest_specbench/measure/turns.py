"""A case of a multi-turn conversation prompt: each turn decoded, timed and judged, one after another, as
Spec-Bench decodes MT-bench's two-turn questions.

One :class:`~.sequence.SequenceRun` per turn, each prepared with the target's greedy answers to the turns before
it (:mod:`.conversation`). A run decodes every turn; its result joins them (:func:`..engine.stats.joined_result`),
so the case's figures sum over the turns, and each turn's own result stays in ``GenerationResult.turns``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..engine.stats import GenerationResult, joined_result
from .case_run import BaselineRun, CaseRun, NewInterleaved
from .conversation import answer_text
from .engines import SpeculativeRun
from .pairing import MULTI_TURN_RUNS
from .sequence import SequenceRun


class TurnsRun(CaseRun):
    """A case of batch size 1 whose prompt has several turns."""

    def prepare(self) -> None:
        turns = self.case.prompt.turns
        self.turns: list[SequenceRun] = []
        answers: list[str] = []
        for index in range(len(turns)):
            turn = SequenceRun(self.case, self.context, tuple(answers))
            turn.prepare()
            self.turns.append(turn)
            if index + 1 < len(turns):
                answers.append(answer_text(turn.target.tokenizer, turn.greedy_answer()))
        # Target, drafter and sampling are every turn's; the costs (the cost model's) are the first turn's.
        self.setup = self.turns[0].setup
        self._last: list[GenerationResult] = []

    def _new_runner(self) -> SpeculativeRun:
        runners = [turn._new_runner() for turn in self.turns]

        def run_turns() -> GenerationResult:
            self._last = [runner() for runner in runners]
            return joined_result(self._last)

        return run_turns

    def baseline(self) -> BaselineRun:
        baselines = [turn.baseline() for turn in self.turns]
        return lambda: joined_result([baseline() for baseline in baselines])

    def interleaved_baseline(self) -> NewInterleaved:
        raise RuntimeError(MULTI_TURN_RUNS)

    @property
    def interleave_refusal(self) -> str | None:
        return MULTI_TURN_RUNS

    def _calibrate(self, baseline: BaselineRun, new_interleaved: NewInterleaved | None) -> None:
        first = self.turns[0]
        first.start_runs()
        first._calibrate(first.baseline(), None)

    def refresh_costs(self) -> None:
        for turn in self.turns:
            turn.refresh_costs()
        self.setup = self.turns[0].setup

    def verdict(self, tokens: list[int]) -> dict[str, Any]:
        """Each turn's tokens judged against its own reference; the case's verdict is the first turn's that is not
        lossless (its divergence counted from the case's first new token), else the first turn's."""
        if [token for result in self._last for token in result.token_ids] != list(tokens):
            raise ValueError("the tokens judged are not those of the case's last run")
        self.turn_verdicts = [turn.verdict(result.token_ids) for turn, result in zip(self.turns, self._last)]
        offset = 0
        for verdict, result in zip(self.turn_verdicts, self._last):
            if verdict["verdict"] != "lossless" and verdict.get("first_divergence") is not None:
                return {**verdict, "first_divergence": offset + verdict["first_divergence"]}
            if verdict["verdict"] != "lossless":
                return verdict
            offset += len(result.token_ids)
        return self.turn_verdicts[0]

    @property
    def input_ids(self) -> torch.Tensor:
        """Every turn's input, joined: its length is the tokens the case's prefills read."""
        return torch.cat([turn.input_ids for turn in self.turns], dim=1)

    @property
    def reference(self) -> list[int]:
        return [token for turn in self.turns for token in turn.reference]
