"""The axes of the case matrix, each declared once.

A case is one value on every axis. Its declaration here gives everything that follows from an axis: its part of
the case id (and of the first seed's config name), the ``specbench`` marker's keyword, whether its value enters
the inputs fingerprint (``--specbench-resume``), the result row's field of the same name (results/schema.py), and
whether the report groups by it, and the caches it does not change. A cache's key holds every axis but those that
declare themselves irrelevant to it (:func:`cache_key`), so a new axis is in every cache's key until its declaration
says otherwise: it cannot collide two cases in a cache by being forgotten.

A case holds its values keyed by these axes (cases/matrix.py ``Case``): its id, config name, block key and place
in the run's order, and the matrix's loop, are derived from this list.

To add an axis: declare it in :data:`AXES` (in id order), with its option, and in :data:`RUN_ORDER` and
:data:`CONFIG_ORDER`; add its row field (results/schema.py), and read its value where it changes the measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .engines import OWN_LOOP_ENGINE, SERVED_ENGINES, runs_own_loop
from .option import Option

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
    #: in the config name only where more than one of its values runs (float32 configs keep their names)
    config_when_shown: bool = False
    #: its value is part of the inputs fingerprint's ``case`` part; the pair and the prompt are fingerprinted by
    #: what they hold (models, drafter, text: measure/case_inputs.py), not by their names
    fingerprinted: bool = True
    #: the report's tables have one group per value (k is what a table ranks within a group, so it has none)
    report_group: bool = True
    #: the caches (:data:`CACHES`) whose content its value does not change: their keys leave it out
    irrelevant_to: frozenset[str] = frozenset()
    #: the run's settings field (settings/config.py) that lists the values it runs; None for the pairs and the
    #: prompts, which the matrix takes as what they are, and for an axis that declares its own option
    config_field: str | None = None
    #: its option, for an axis that declares its own (its parser gives the tuple of values to run): the option table
    #: takes it, and the run's settings keep its values under the axis's name (``SpecbenchConfig.axis_values``)
    option: Option | None = None
    #: a case's value where none is given
    default: Any = None
    #: its part of a block's key (the case's values, the derived parts included); None: its id part
    block_part: Callable[[Mapping[str, Any]], str] | None = None
    #: the block scopes (:data:`BLOCK_SCOPES`) whose blocks hold several of its values: it is not in their key
    spans: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # The run's settings keep an axis's values under its name, and read every option by its field.
        if self.option is not None and self.option.field != self.name:
            raise ValueError(
                f"axis {self.name!r} declares an option whose field is {self.option.field!r}, not its name"
            )


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


#: how cases are timed together (measure/blocks.py): an engine that runs its own loop times every pair, k and
#: engine of a prompt on one baseline; a served engine's server holds one speculative config (pair, k) for its life,
#: so its block is that config over the prompts
PROMPT_SCOPE, SERVED_SCOPE = "prompt", "served config"
BLOCK_SCOPES = (PROMPT_SCOPE, SERVED_SCOPE)


def block_scope(engine: str) -> str:
    """The block scope of ``engine``'s cases."""
    return SERVED_SCOPE if engine in SERVED_ENGINES else PROMPT_SCOPE


AXES: tuple[Axis, ...] = (
    Axis(
        "pair",
        str,
        always_in_id=True,
        config_part=str,
        fingerprinted=False,
        irrelevant_to=_BY_TARGET,
        block_part=lambda values: f":{values['pair']}",
        spans=frozenset({PROMPT_SCOPE}),
    ),
    Axis(
        "engine",
        lambda engine: f"-{engine}",
        config_part=lambda name: "" if runs_own_loop(name) else f"_{name}",
        # what is measured of the models and prompts, whatever engine then runs them
        irrelevant_to=_ALL_CACHES - {"warm_up", "served_warm_up", "race"},
        config_field="engines",
        default=OWN_LOOP_ENGINE,
        # its own kernels' baseline, hence a block of its own (measure/engines.py ``Engine.baseline_kernels``)
        block_part=lambda values: "" if runs_own_loop(values["engine"]) else f"/{values['engine']}",
    ),
    Axis(
        "k",
        lambda k: f"-k{k}",
        always_in_id=True,
        config_part=lambda k: f"_k{k}",
        report_group=False,
        irrelevant_to=_ALL_CACHES - {"served_warm_up"},  # a served engine starts a server per k
        config_field="ks",
        block_part=lambda values: f"/k{values['k']}",
        spans=frozenset({PROMPT_SCOPE}),
    ),
    Axis(
        "batch",
        lambda batch: f"-b{batch}",
        config_part=lambda batch: f"_b{batch}" if batch > 1 else "",
        irrelevant_to=_ALL_CACHES - {"warm_up", "batched_costs"},
        config_field="batches",
        default=1,
        # a batch's baseline is the target's batched decoding; a served engine runs batch 1 alone (the others skip)
        block_part=lambda values: f"/b{values['batch']}" if values["batch"] > 1 else "",
        spans=frozenset({SERVED_SCOPE}),
    ),
    # Its label may be the category: a cache that depends on the prompt takes its id (``prompt_id``).
    Axis(
        "prompt",
        lambda label: f"-{label}",
        always_in_id=True,
        fingerprinted=False,
        irrelevant_to=_ALL_CACHES,
        block_part=lambda values: f":{values['prompt_id']}",
        spans=frozenset({SERVED_SCOPE}),
    ),
    Axis(
        "dtype",
        lambda dtype: DTYPE_ID_SUFFIXES.get(dtype, f"-{dtype}"),
        config_part=lambda dtype: DTYPE_ID_SUFFIXES.get(dtype, f"-{dtype}").replace("-", "_"),
        config_when_shown=True,
        irrelevant_to=frozenset({"sizes", "turn_lengths", "row_input_ids", "race"}),
        config_field="dtypes",
        default="float32",
        # each case's speedup is against the target's baseline in its own dtype
        block_part=lambda values: "" if values["dtype"] == "float32" else f"/{values['dtype']}",
    ),
)
AXIS_NAMES: tuple[str, ...] = tuple(axis.name for axis in AXES)
AXES_BY_NAME: dict[str, Axis] = {axis.name: axis for axis in AXES}
#: the order the matrix runs cases in, after the target (the order its first pair comes): each axis's values in the
#: order given; also the order of a block key's parts
RUN_ORDER: tuple[str, ...] = ("dtype", "prompt", "batch", "pair", "k", "engine")
#: the order of the config name's parts (the first seed's ``gpt2_large_k8``, then ``_hf``, ``_b4``, ``_bf16``)
CONFIG_ORDER: tuple[str, ...] = ("pair", "k", "engine", "batch", "prompt", "dtype")
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


def block_key(values: Mapping[str, Any]) -> str:
    """The key of the block a case is timed in, e.g. ``gemma3-270m/bfloat16:code-01`` or, for a served engine,
    ``gemma3-270m:gemma3_pld/k4/vllm``: the target and, in :data:`RUN_ORDER`, the part of every axis whose values
    the case's block scope does not span."""
    scope = block_scope(values["engine"])
    parts = []
    for name in RUN_ORDER:
        axis = AXES_BY_NAME[name]
        if scope not in axis.spans:
            parts.append(axis.block_part(values) if axis.block_part else axis.id_part(values[name]))
    return values["target"] + "".join(parts)


def config_name(values: Mapping[str, Any], shown: Iterable[str]) -> str:
    """The first seed's config name, e.g. ``gpt2_large_k8`` (``_hf``, ``_b4``, ``_bf16`` where they apply)."""
    shown = set(shown)
    parts = []
    for name in CONFIG_ORDER:
        axis = AXES_BY_NAME[name]
        if axis.config_part is not None and (name in shown or not axis.config_when_shown):
            parts.append(axis.config_part(values[name]))
    return "".join(parts)


def values_to_run(config: Any) -> dict[str, Sequence[Any]]:
    """The values each axis runs, from the run's settings: by the name of the field that lists them, or by the axis's
    name where the axis declares its own option."""
    typed = {a.config_field: getattr(config, a.config_field) for a in AXES if a.config_field is not None}
    return {**typed, **{a.name: config.axis_values[a.name] for a in AXES if a.option is not None}}


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
