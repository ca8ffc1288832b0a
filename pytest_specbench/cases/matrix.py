"""The case matrix: one case per (pair, k, prompt), engine, batch size and dtype, in a fixed order."""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..settings import axes
from ..settings.axes import DTYPE_ID_SUFFIXES
from ..settings.engines import OWN_LOOP_ENGINE
from .pairs import PairSpec
from .prompts import Prompt, case_label


@dataclass(frozen=True, init=False)
class Case:
    """One case of the matrix: its value on every axis (settings/axes.py), keyed by the axis's name, and the pair and
    the prompt behind two of them (the pair's name, and the prompt's label: its category where one prompt per
    category runs, else its id). Its id, config name, cache keys and block are derived from the axes."""

    pair: PairSpec
    prompt: Prompt
    #: (axis name, value) for every axis, in the axes' order
    values: tuple[tuple[str, Any], ...]
    shown: frozenset[str]  # the axes not always in the id that show in it: more than one value runs

    def __init__(
        self,
        pair: PairSpec,
        k: int | str | None = None,
        prompt: Prompt | None = None,
        prompt_label: str | None = None,
        *,
        shown: Iterable[str] = (),
        values: Iterable[tuple[str, Any]] | None = None,
        **axis_values: Any,
    ) -> None:
        """``Case(pair, k, prompt, prompt_label, engine=..., batch=...)``: an axis not named takes its default;
        ``values`` (every axis's, as :attr:`values` holds them) is what ``dataclasses.replace`` passes."""
        unknown = sorted(set(axis_values) - set(axes.AXIS_NAMES))
        if unknown:
            raise TypeError(f"no axis {', '.join(unknown)} to name; the axes: {', '.join(axes.AXIS_NAMES)}")
        if prompt is None:
            raise TypeError("a case needs its prompt")
        if values is not None:
            named = {"k": k, "prompt": prompt_label}
            given = {
                **dict(values),
                **{n: v for n, v in named.items() if v is not None},
                **axis_values,
                "pair": pair.name,
            }
        elif k is None or prompt_label is None:
            raise TypeError("a case needs its k and its prompt's label")
        else:
            given = {"pair": pair.name, "k": k, "prompt": prompt_label, **axis_values}
        object.__setattr__(self, "pair", pair)
        object.__setattr__(self, "prompt", prompt)
        object.__setattr__(self, "values", tuple((a.name, given.get(a.name, a.default)) for a in axes.AXES))
        object.__setattr__(self, "shown", frozenset(shown))

    def value(self, axis: str) -> Any:
        """The case's value on ``axis``."""
        return dict(self.values)[axis]

    @property
    def k(self) -> int | str:
        """A draft length, or a schedule's name (``auto``, ``heuristic``)."""
        return self.value("k")

    @property
    def engine(self) -> str:
        return self.value("engine")

    @property
    def batch(self) -> int:
        """Prompts decoded at once (measure/batches.py)."""
        return self.value("batch")

    @property
    def dtype(self) -> str:
        """The model dtype: the run's, or the pair's own (PairSpec.dtype)."""
        return self.value("dtype")

    @property
    def prompt_label(self) -> str:
        return self.value("prompt")

    @property
    def batched(self) -> bool:
        """Several prompts decoded at once, by the batched engine (measure/batches.py)."""
        return self.batch > 1

    def axis_values(self) -> dict[str, Any]:
        """The case's value on every axis of the matrix (settings/axes.py), and the key parts derived from them."""
        return {**dict(self.values), "target": target_of(self.pair), "prompt_id": self.prompt.id}

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
        """The cases timed together in blocked rounds (one baseline per round), by the case's block scope
        (settings/axes.py ``block_key``): on an engine that runs its own loop, a prompt's cases on one target, dtype
        and batch size, every pair and k in it; a batch size above 1 has a baseline of its own (the target's batched
        decoding), a dtype too (each case's speedup is against the target's baseline in its own dtype), and an
        engine other than native (``/hf``): its baseline runs the model's own kernels, as its runs do, so that a
        speedup compares equal kernels (measure/engines.py ``Engine.baseline_kernels``). A served engine's block is
        one (target, dtype, pair, k) over its prompts instead: its server fixes the speculative config when it
        starts (measure/served_case.py), and each case pairs with its own prompt's baseline. The device is the
        worker's."""
        return axes.block_key(self.axis_values())


def target_of(pair: PairSpec) -> str:
    """The target model as blocks tell targets apart: source and revision (the dtype is the case's)."""
    return f"{pair.target}{'@' + pair.revision if pair.revision else ''}"


def build_matrix(
    pairs: Sequence[PairSpec],
    ks: Sequence[int | str],
    prompts: Sequence[Prompt],
    engines: Sequence[str] = (OWN_LOOP_ENGINE,),
    batches: Sequence[int] = (1,),
    dtypes: Sequence[str] = ("float32",),
    **more: Sequence[Any],
) -> list[Case]:
    """Every pair on every prompt with every value of the other axes (``more``: the values of an axis that declares its
    own option, by the axis's name; settings/axes.py ``values_to_run``), block
    by block (:attr:`Case.block`): targets in the order their first pair comes, then each axis of
    :data:`~..settings.axes.RUN_ORDER` in the order its values are given (dtypes, then a pair's own; prompts in file
    order), a served engine's blocks after the target's others in its dtype. A pair with its own dtype
    (``PairSpec.dtype``) runs in that one only. A block's cases run back to back, so its rows reach the results log
    together, and every worker sees the same order."""
    given: dict[str, Sequence[Any]] = {"k": ks, "engine": engines, "batch": batches, "dtype": dtypes, **more}
    loop = [name for name in axes.AXIS_NAMES if name not in ("pair", "prompt")]
    for name in loop:  # an axis whose values are not given runs its default alone
        given.setdefault(name, (axes.AXES_BY_NAME[name].default,))
    per_category: dict[str, int] = {}
    for prompt in prompts:
        per_category[prompt.category] = per_category.get(prompt.category, 0) + 1
    single = all(count == 1 for count in per_category.values())
    labels = [case_label(prompt, single) for prompt in prompts]
    shown = frozenset(name for name in loop if not axes.AXES_BY_NAME[name].always_in_id and len(given[name]) > 1)
    cases = []
    for pair in pairs:
        pinned = {"dtype": (pair.dtype,)} if pair.dtype else {}
        for prompt, label in zip(prompts, labels):
            for combination in itertools.product(*(pinned.get(name, given[name]) for name in loop)):
                values = dict(zip(loop, combination))
                cases.append(Case(pair, values.pop("k"), prompt, label, shown=shown, **values))

    ranks = {name: _ranks(values) for name, values in given.items()}
    ranks["dtype"] = _ranks([*dtypes, *DTYPE_ID_SUFFIXES])
    ranks["pair"] = _ranks(pair.name for pair in pairs)
    ranks["prompt"] = _ranks(prompt.id for prompt in prompts)
    targets = _ranks(target_of(pair) for pair in pairs)

    def order(case: Case) -> tuple:
        values = {**case.axis_values(), "prompt": case.prompt.id}
        in_order = tuple(ranks[name][values[name]] for name in axes.RUN_ORDER)
        scope = axes.block_scope(case.engine)
        # A served engine's blocks come after the target's others in the dtype, one after another: a signal between
        # two of them then finds every case of a finished block run.
        apart = (
            ()
            if scope == axes.PROMPT_SCOPE
            else (
                True,
                *(rank for name, rank in zip(axes.RUN_ORDER, in_order) if scope not in axes.AXES_BY_NAME[name].spans),
            )
        )
        return (targets[target_of(case.pair)], in_order[0], apart, in_order)

    return sorted(cases, key=order)


def _ranks(values: Iterable[Hashable]) -> dict[Hashable, int]:
    """Each value's place, the first time it comes."""
    return {value: position for position, value in enumerate(dict.fromkeys(values))}


def shard_pairs(pairs: Sequence[PairSpec], index: int, count: int) -> list[PairSpec]:
    """Shard ``index`` of ``count`` (1-based): the pairs in name order, dealt round-robin.

    By pair, so each model loads on one shard only; by name, so every shard of a CI matrix
    given the same selection computes the same split.
    """
    ordered = sorted(pairs, key=lambda pair: pair.name)
    chosen = {pair.name for position, pair in enumerate(ordered) if position % count == index - 1}
    return [pair for pair in pairs if pair.name in chosen]
