"""The axes of the case matrix, each declared once.

A case is one value on every axis. Its declaration here gives everything that follows from an axis: its part of
the case id (and of the first seed's config name), the ``specbench`` marker's keyword, whether its value enters
the inputs fingerprint (``--specbench-resume``), the result row's field of the same name (results/schema.py), and
whether the report groups by it, and the caches it does not change. A cache's key holds every axis but those that
declare themselves irrelevant to it (:func:`cache_key`), so a new axis is in every cache's key until its declaration
says otherwise: it cannot collide two cases in a cache by being forgotten.

To add an axis: declare it in :data:`AXES` (in id order), add its option (settings/options.py) and its row field,
and read its value where it changes the measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .engine_names import runs_own_loop

#: a dtype's part of a case id; float32 shows nothing, so stored float32 ids stay valid when dtypes are added
DTYPE_ID_SUFFIXES = {"float32": "", "bfloat16": "-bf16", "float16": "-fp16"}


@dataclass(frozen=True)
class Axis:
    """One axis of the case matrix. ``name`` is the case's attribute, the marker keyword and the row's field."""

    name: str
    #: its fragment of the case id for one value ("" shows nothing)
    id_part: Callable[[Any], str]
    #: shown in every id (pair, k, prompt), or only when more than one value runs (the id stays short)
    always_in_id: bool = False
    #: its fragment of the row's ``config`` name (the first seed's naming), or None when it has none
    config_part: Callable[[Any], str] | None = None
    #: its value is part of the inputs fingerprint's ``case`` part; the pair and the prompt are fingerprinted by
    #: what they hold (models, drafter, text: measure/case_inputs.py), not by their names
    fingerprinted: bool = True
    #: the report's tables have one group per value (k is what a table ranks within a group, so it has none)
    report_group: bool = True
    #: the caches (:data:`CACHES`) whose content its value does not change: their keys leave it out
    irrelevant_to: frozenset[str] = frozenset()


#: the caches keyed by a case, by name, each with the parts derived from the axes it adds to its key
#: (:data:`DERIVED_KEY_PARTS`); what each holds is measure/'s
CACHES: dict[str, tuple[str, ...]] = {
    "warm_up": (),  # a warm-up of a case's models on its engine
    "served_warm_up": (),  # a served engine's server's first requests
    "sizes": (),  # the pair's parameter counts
    "input_ids": ("target", "prompt_id"),  # a prompt's token ids
    "costs": (),  # the cost probe of a pair's models
    "reference": ("target",),  # the target's own greedy tokens of one input
    "sampling_check": ("prompt_id",),  # the sampling check of a pair on one prompt
    "turn_lengths": ("prompt_id",),  # a conversation's turns' lengths, for the plan
    "row_input_ids": ("target",),  # one row's token ids in a batch
    "batched_reference": ("target",),  # the target's batched greedy tokens
    "batched_costs": ("prompt_id",),  # the cost probe of a batch
    "race": ("prompt_id",),  # the constant k raced against each other (k is what it ranks)
}
_ALL_CACHES = frozenset(CACHES)
#: the caches whose content depends on the target model, not on which pair holds it
_BY_TARGET = frozenset({"input_ids", "reference", "turn_lengths", "row_input_ids", "batched_reference"})


AXES: tuple[Axis, ...] = (
    Axis("pair", str, always_in_id=True, config_part=str, fingerprinted=False, irrelevant_to=_BY_TARGET),
    Axis(
        "engine",
        lambda engine: f"-{engine}",
        config_part=lambda name: "" if runs_own_loop(name) else f"_{name}",
        # what is measured of the models and prompts, whatever engine then runs them
        irrelevant_to=_ALL_CACHES - {"warm_up", "served_warm_up", "race"},
    ),
    Axis(
        "k",
        lambda k: f"-k{k}",
        always_in_id=True,
        config_part=lambda k: f"_k{k}",
        report_group=False,
        irrelevant_to=_ALL_CACHES - {"served_warm_up"},  # a served engine starts a server per k
    ),
    Axis(
        "batch",
        lambda batch: f"-b{batch}",
        config_part=lambda batch: f"_b{batch}" if batch > 1 else "",
        irrelevant_to=_ALL_CACHES - {"warm_up", "batched_costs"},
    ),
    # Its label may be the category: a cache that depends on the prompt takes its id (``prompt_id``).
    Axis("prompt", lambda label: f"-{label}", always_in_id=True, fingerprinted=False, irrelevant_to=_ALL_CACHES),
    Axis(
        "dtype",
        lambda dtype: DTYPE_ID_SUFFIXES.get(dtype, f"-{dtype}"),
        config_part=lambda dtype: DTYPE_ID_SUFFIXES.get(dtype, f"-{dtype}").replace("-", "_"),
        irrelevant_to=frozenset({"sizes", "turn_lengths", "row_input_ids", "race"}),
    ),
)
AXIS_NAMES: tuple[str, ...] = tuple(axis.name for axis in AXES)
#: what a cache may depend on besides the axes: values derived from them
DERIVED_KEY_PARTS = {
    "target": "the pair's target model and revision (pairs that share a target share its caches)",
    "prompt_id": "the prompt's id in its file (the prompt axis shows its category where one runs per category)",
}


def case_id(values: Mapping[str, Any], shown: Iterable[str]) -> str:
    """The case id from its value on every axis, e.g. ``gpt2_large-k8-code_python``; an axis that is not
    always in the id shows only when named in ``shown`` (more than one of its values runs)."""
    shown = set(shown)
    return "".join(a.id_part(values[a.name]) for a in AXES if a.always_in_id or a.name in shown)


def config_name(values: Mapping[str, Any], shown: Iterable[str]) -> str:
    """The first seed's config name, e.g. ``gpt2_large_k8`` (``_hf``, ``_b4``, ``_bf16`` where they apply)."""
    shown = set(shown)
    parts = {a.name: a.config_part(values[a.name]) for a in AXES if a.config_part is not None}
    if "dtype" not in shown:
        parts["dtype"] = ""
    return parts["pair"] + parts["k"] + parts["engine"] + parts["batch"] + parts["dtype"]


def fingerprint_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The axes' part of a case's inputs fingerprint: its value on every fingerprinted axis."""
    return {a.name: values[a.name] for a in AXES if a.fingerprinted}


def report_groups(exclude: Iterable[str] = ()) -> tuple[str, ...]:
    """The axes the report groups rows by, in id order, less ``exclude``."""
    excluded = set(exclude)
    return tuple(a.name for a in AXES if a.report_group and a.name not in excluded)


def cache_key(values: Mapping[str, Any], cache: str, **settings: Hashable) -> tuple:
    """``cache``'s key for one case: its value on every axis not declared irrelevant to the cache, the derived
    parts the cache adds (:data:`CACHES`), and the named ``settings`` beyond the axes that change what is cached.
    Each part is named, so two caches' keys never mean one another's."""
    if cache not in CACHES:
        raise KeyError(f"no cache {cache!r}; caches: {', '.join(CACHES)}")
    names = sorted([*(a.name for a in AXES if cache not in a.irrelevant_to), *CACHES[cache]])
    return (cache, *((name, values[name]) for name in names), *sorted(settings.items()))
