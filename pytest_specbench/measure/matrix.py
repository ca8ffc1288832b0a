"""The case matrix: one case per (pair, k, prompt) and engine, in a fixed order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .pairs import PairSpec
from .prompts import Prompt, case_label


@dataclass(frozen=True)
class Case:
    pair: PairSpec
    k: int | str  # a draft length, or a schedule's name ("auto", "heuristic")
    prompt: Prompt
    prompt_label: str  # the category when one prompt per category runs, else the prompt id
    engine: str = "native"
    engine_in_id: bool = False  # more than one engine runs

    @property
    def id(self) -> str:
        """The pytest id, e.g. ``gpt2_large-k8-code_python``; ``-k "gpt2_large and k8"`` selects on it.

        With more than one engine: ``gpt2_large-hf-k8-code_python``.
        """
        engine = f"-{self.engine}" if self.engine_in_id else ""
        return f"{self.pair.name}{engine}-k{self.k}-{self.prompt_label}"


def build_matrix(pairs: Sequence[PairSpec], ks: Sequence[int | str], prompts: Sequence[Prompt],
                 engines: Sequence[str] = ("native",)) -> list[Case]:
    """Pairs outermost, then prompts, then k, then engine: engines of one (pair, k, prompt) run back to back,
    and each worker of a pair sees the same order."""
    per_category: dict[str, int] = {}
    for prompt in prompts:
        per_category[prompt.category] = per_category.get(prompt.category, 0) + 1
    single = all(count == 1 for count in per_category.values())
    labels = [case_label(prompt, single) for prompt in prompts]
    return [
        Case(pair=pair, k=k, prompt=prompt, prompt_label=label, engine=engine, engine_in_id=len(engines) > 1)
        for pair in pairs
        for prompt, label in zip(prompts, labels)
        for k in ks
        for engine in engines
    ]


def shard_pairs(pairs: Sequence[PairSpec], index: int, count: int) -> list[PairSpec]:
    """Shard ``index`` of ``count`` (1-based): the pairs in name order, dealt round-robin.

    By pair, so each model loads on one shard only; by name, so every shard of a CI matrix
    given the same selection computes the same split.
    """
    ordered = sorted(pairs, key=lambda pair: pair.name)
    chosen = {pair.name for position, pair in enumerate(ordered) if position % count == index - 1}
    return [pair for pair in pairs if pair.name in chosen]
