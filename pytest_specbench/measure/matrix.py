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
    batch: int = 1  # prompts decoded at once (measure/batches.py)
    batch_in_id: bool = False  # more than one batch size runs

    @property
    def batched(self) -> bool:
        """Several prompts decoded at once, by the batched engine (measure/batches.py)."""
        return self.batch > 1

    @property
    def id(self) -> str:
        """The pytest id, e.g. ``gpt2_large-k8-code_python``; ``-k "gpt2_large and k8"`` selects on it.

        With more than one engine: ``gpt2_large-hf-k8-code_python``; with more than one batch size:
        ``gpt2_large-k8-b4-code_python``.
        """
        engine = f"-{self.engine}" if self.engine_in_id else ""
        batch = f"-b{self.batch}" if self.batch_in_id else ""
        return f"{self.pair.name}{engine}-k{self.k}{batch}-{self.prompt_label}"

    @property
    def block(self) -> str:
        """The cases timed together in blocked rounds (one baseline per round): same target, revision, dtype,
        prompt and batch size; every pair, k and engine on that target. The device is the worker's. A batch size
        above 1 has a baseline of its own (the target's batched decoding), hence a block of its own (``/b{B}``)."""
        return f"{target_of(self.pair)}:{self.prompt.id}" + (f"/b{self.batch}" if self.batched else "")


def target_of(pair: PairSpec) -> str:
    """The target as blocks tell targets apart: source, revision and dtype override."""
    return f"{pair.target}{'@' + pair.revision if pair.revision else ''}{'/' + pair.dtype if pair.dtype else ''}"


def build_matrix(
    pairs: Sequence[PairSpec],
    ks: Sequence[int | str],
    prompts: Sequence[Prompt],
    engines: Sequence[str] = ("native",),
    batches: Sequence[int] = (1,),
) -> list[Case]:
    """Block by block (a target, a prompt and a batch size: see :attr:`Case.block`), targets in the order their
    first pair comes, prompts in file order, batch sizes in the order given; within a block pairs, then k, then
    engine. A block's cases run back to back, so its rows reach the results log together, and every worker sees
    the same order."""
    per_category: dict[str, int] = {}
    for prompt in prompts:
        per_category[prompt.category] = per_category.get(prompt.category, 0) + 1
    single = all(count == 1 for count in per_category.values())
    labels = [case_label(prompt, single) for prompt in prompts]
    targets: dict[str, int] = {}
    for pair in pairs:
        targets.setdefault(target_of(pair), len(targets))
    cases = [
        Case(
            pair=pair,
            k=k,
            prompt=prompt,
            prompt_label=label,
            engine=engine,
            engine_in_id=len(engines) > 1,
            batch=batch,
            batch_in_id=len(batches) > 1,
        )
        for pair in pairs
        for prompt, label in zip(prompts, labels)
        for batch in batches
        for k in ks
        for engine in engines
    ]
    order = {prompt.id: position for position, prompt in enumerate(prompts)}
    batch_order = {batch: position for position, batch in enumerate(batches)}
    # sorted() is stable: within a block, pairs, k and engines keep the order above.
    return sorted(
        cases, key=lambda case: (targets[target_of(case.pair)], order[case.prompt.id], batch_order[case.batch])
    )


def shard_pairs(pairs: Sequence[PairSpec], index: int, count: int) -> list[PairSpec]:
    """Shard ``index`` of ``count`` (1-based): the pairs in name order, dealt round-robin.

    By pair, so each model loads on one shard only; by name, so every shard of a CI matrix
    given the same selection computes the same split.
    """
    ordered = sorted(pairs, key=lambda pair: pair.name)
    chosen = {pair.name for position, pair in enumerate(ordered) if position % count == index - 1}
    return [pair for pair in pairs if pair.name in chosen]
