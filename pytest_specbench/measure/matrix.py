"""The case matrix: one case per (pair, k, prompt), engine, batch size and dtype, in a fixed order."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from ..settings import axes
from ..settings.axes import DTYPE_ID_SUFFIXES
from ..settings.engine_names import SERVED_ENGINES, runs_own_loop
from .pairs import PairSpec
from .prompts import Prompt, case_label


@dataclass(frozen=True)
class Case:
    pair: PairSpec
    k: int | str  # a draft length, or a schedule's name ("auto", "heuristic")
    prompt: Prompt
    prompt_label: str  # the category when one prompt per category runs, else the prompt id
    engine: str = "native"
    batch: int = 1  # prompts decoded at once (measure/batches.py)
    dtype: str = "float32"  # the model dtype: the run's, or the pair's own (PairSpec.dtype)
    shown: frozenset[str] = frozenset()  # the axes not always in the id that show in it: more than one value runs

    @property
    def batched(self) -> bool:
        """Several prompts decoded at once, by the batched engine (measure/batches.py)."""
        return self.batch > 1

    def axis_values(self) -> dict[str, Any]:
        """The case's value on every axis of the matrix (settings/axes.py), and the key parts derived from them."""
        return {
            "pair": self.pair.name,
            "engine": self.engine,
            "k": self.k,
            "batch": self.batch,
            "prompt": self.prompt_label,
            "dtype": self.dtype,
            "target": target_of(self.pair),
            "prompt_id": self.prompt.id,
        }

    @property
    def id(self) -> str:
        """The pytest id, e.g. ``gpt2_large-k8-code_python``; ``-k "gpt2_large and k8"`` selects on it.

        With more than one engine: ``gpt2_large-hf-k8-code_python``; with more than one batch size:
        ``gpt2_large-k8-b4-code_python``; with more than one dtype, for a dtype other than float32:
        ``gpt2_large-k8-code_python-bf16`` (a float32 case keeps its id, so stored baselines still match).
        """
        return axes.case_id(self.axis_values(), self.shown)

    @property
    def config(self) -> str:
        """The first seed's config name, e.g. ``gpt2_large_k8``."""
        return axes.config_name(self.axis_values(), self.shown)

    def key(self, cache: str, **settings: Hashable) -> tuple:
        """``cache``'s key for this case (settings/axes.py :data:`~..settings.axes.CACHES`): its values on the axes
        that change that cache, and ``settings``."""
        return axes.cache_key(self.axis_values(), cache, **settings)

    @property
    def block(self) -> str:
        """The cases timed together in blocked rounds (one baseline per round): same target, revision, dtype,
        prompt and batch size; every pair, k and engine on that target. The device is the worker's. A batch size
        above 1 has a baseline of its own (the target's batched decoding), hence a block of its own (``/b{B}``);
        so has a dtype (``/bfloat16``): each case's speedup is against the target's baseline in its own dtype; and
        an engine other than native (``/hf``): its baseline runs the model's own kernels, as its runs do, so that a
        speedup compares equal kernels (measure/engines.py ``Engine.baseline_kernels``). A served engine's block is
        one (target, dtype, pair, k) over its prompts instead: its server fixes the speculative config when it
        starts (measure/served_case.py), and each case pairs with its own prompt's baseline."""
        dtype = "" if self.dtype == "float32" else f"/{self.dtype}"
        engine = "" if runs_own_loop(self.engine) else f"/{self.engine}"
        if self.engine in SERVED_ENGINES:  # one server per speculative config: its prompts share a block
            return f"{target_of(self.pair)}{dtype}:{self.pair.name}/k{self.k}" + engine
        return f"{target_of(self.pair)}{dtype}:{self.prompt.id}" + (f"/b{self.batch}" if self.batched else "") + engine


def target_of(pair: PairSpec) -> str:
    """The target model as blocks tell targets apart: source and revision (the dtype is the case's)."""
    return f"{pair.target}{'@' + pair.revision if pair.revision else ''}"


def build_matrix(
    pairs: Sequence[PairSpec],
    ks: Sequence[int | str],
    prompts: Sequence[Prompt],
    engines: Sequence[str] = ("native",),
    batches: Sequence[int] = (1,),
    dtypes: Sequence[str] = ("float32",),
) -> list[Case]:
    """Block by block (a target, a dtype, a prompt and a batch size: see :attr:`Case.block`), targets in the order
    their first pair comes, dtypes in the order given (a pair's own after them), prompts in file order, batch
    sizes in the order given; within a block pairs, then k, then engine. A pair with its own dtype
    (``PairSpec.dtype``) runs in that one only. A block's cases run back to back, so its rows reach the results
    log together, and every worker sees the same order."""
    per_category: dict[str, int] = {}
    for prompt in prompts:
        per_category[prompt.category] = per_category.get(prompt.category, 0) + 1
    single = all(count == 1 for count in per_category.values())
    labels = [case_label(prompt, single) for prompt in prompts]
    several = {"engine": engines, "batch": batches, "dtype": dtypes}
    shown = frozenset(name for name, values in several.items() if len(values) > 1)
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
            batch=batch,
            dtype=dtype,
            shown=shown,
        )
        for pair in pairs
        for dtype in ((pair.dtype,) if pair.dtype else dtypes)
        for prompt, label in zip(prompts, labels)
        for batch in batches
        for k in ks
        for engine in engines
    ]
    order = {prompt.id: position for position, prompt in enumerate(prompts)}
    batch_order = {batch: position for position, batch in enumerate(batches)}
    dtype_order = {dtype: position for position, dtype in enumerate(dict.fromkeys([*dtypes, *DTYPE_ID_SUFFIXES]))}
    pair_order = {pair.name: position for position, pair in enumerate(pairs)}
    k_order = {k: position for position, k in enumerate(ks)}

    def served_block(case: Case) -> tuple:
        """After the target's other cases, a served engine's cases one block after another (Case.block): a
        signal between two of them then finds every case of a finished block run."""
        if case.engine not in SERVED_ENGINES:
            return (False,)
        return (True, pair_order[case.pair.name], k_order[case.k], case.engine)

    # sorted() is stable: within a block, pairs, k and engines keep the order above.
    return sorted(
        cases,
        key=lambda case: (
            targets[target_of(case.pair)],
            dtype_order[case.dtype],
            served_block(case),
            order[case.prompt.id],
            batch_order[case.batch],
        ),
    )


def shard_pairs(pairs: Sequence[PairSpec], index: int, count: int) -> list[PairSpec]:
    """Shard ``index`` of ``count`` (1-based): the pairs in name order, dealt round-robin.

    By pair, so each model loads on one shard only; by name, so every shard of a CI matrix
    given the same selection computes the same split.
    """
    ordered = sorted(pairs, key=lambda pair: pair.name)
    chosen = {pair.name for position, pair in enumerate(ordered) if position % count == index - 1}
    return [pair for pair in pairs if pair.name in chosen]
