"""A case of a multi-turn conversation prompt: each turn decoded, timed and judged, one after another, as
Spec-Bench decodes MT-bench's two-turn questions.

One :class:`~.sequence.SequenceRun` per turn, each prepared with the target's greedy answers to the turns before
it (:mod:`.conversation`). A run decodes every turn; its result joins them (:func:`..engine.stats.joined_result`),
so the case's figures sum over the turns, and each turn's own result stays in ``GenerationResult.turns``.
"""

from __future__ import annotations

import torch

from ..cases.conversation import answer_text
from ..engine.stats import GenerationResult, joined_result
from .case_run import BaselineRun, CaseRun, Judgement, NewInterleaved
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
            turn = SequenceRun(self.case, self.context, tuple(answers))  # prepared as it is made
            self.turns.append(turn)
            if index + 1 < len(turns):
                answers.append(answer_text(turn.target.tokenizer, turn.greedy_answer()))
        # Target, drafter and sampling are every turn's; the costs (the cost model's) are the first turn's.
        self.setup = self.turns[0].setup

    def new_runner(self) -> SpeculativeRun:
        runners = [turn.new_runner() for turn in self.turns]
        return lambda: joined_result([runner() for runner in runners])

    def baseline(self) -> BaselineRun:
        baselines = [turn.baseline() for turn in self.turns]
        return lambda: joined_result([baseline() for baseline in baselines])

    @property
    def interleave_refusal(self) -> str | None:
        return MULTI_TURN_RUNS

    def calibrate(self, baseline: BaselineRun, new_interleaved: NewInterleaved | None) -> None:
        first = self.turns[0]
        first.start_runs()
        first.calibrate(first.baseline(), None)

    def refresh_costs(self) -> None:
        for turn in self.turns:
            turn.refresh_costs()
        self.setup = self.turns[0].setup

    def judge(self, result: GenerationResult) -> Judgement:
        """Each turn's tokens (``result.turns``) judged against its own reference; the case's verdict is the first
        turn's that is not lossless (its divergence counted from the case's first new token), else the first
        turn's."""
        if len(result.turns) != len(self.turns):
            raise ValueError(f"a run of {len(result.turns)} turn(s) judged for a case of {len(self.turns)}")
        verdicts = [turn.verdict(part.token_ids) for turn, part in zip(self.turns, result.turns)]
        offset = 0
        for verdict, part in zip(verdicts, result.turns):
            if verdict["verdict"] != "lossless" and verdict.get("first_divergence") is not None:
                return Judgement({**verdict, "first_divergence": offset + verdict["first_divergence"]}, verdicts)
            if verdict["verdict"] != "lossless":
                return Judgement(verdict, verdicts)
            offset += len(part.token_ids)
        return Judgement(verdicts[0], verdicts)

    @property
    def input_ids(self) -> torch.Tensor:
        """Every turn's input, joined: its length is the tokens the case's prefills read."""
        return torch.cat([turn.input_ids for turn in self.turns], dim=1)

    @property
    def reference(self) -> list[int]:
        return [token for turn in self.turns for token in turn.reference]
