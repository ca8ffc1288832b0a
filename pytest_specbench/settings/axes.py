"""The axes of the case matrix, each declared once.

A case is one value on every axis. Its declaration here gives everything that follows from an axis: its part of
the case id (and of the first seed's config name), the ``specbench`` marker's keyword, whether its value enters
the inputs fingerprint (``--specbench-resume``), the result row's field of the same name (results/schema.py), and
whether the report groups by it. Cache keys are built from the axes a cache depends on (:func:`cache_key`), never
by hand, so a new axis cannot collide two cases in a cache.

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


AXES: tuple[Axis, ...] = (
    Axis("pair", str, always_in_id=True, config_part=str, fingerprinted=False),
    Axis(
        "engine", lambda engine: f"-{engine}", config_part=lambda engine: "" if runs_own_loop(engine) else f"_{engine}"
    ),
    Axis("k", lambda k: f"-k{k}", always_in_id=True, config_part=lambda k: f"_k{k}", report_group=False),
    Axis("batch", lambda batch: f"-b{batch}", config_part=lambda batch: f"_b{batch}" if batch > 1 else ""),
    Axis("prompt", lambda label: f"-{label}", always_in_id=True, fingerprinted=False),
    Axis(
        "dtype",
        lambda dtype: DTYPE_ID_SUFFIXES.get(dtype, f"-{dtype}"),
        config_part=lambda dtype: DTYPE_ID_SUFFIXES.get(dtype, f"-{dtype}").replace("-", "_"),
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


def cache_key(values: Mapping[str, Any], depends_on: Iterable[str], **settings: Hashable) -> tuple:
    """A cache's key for one case: its value on each axis the cache ``depends_on`` (checked to be axes), plus
    the named ``settings`` beyond the axes that change what is cached. The axes are named in the key, so two
    caches' keys never mean one another's."""
    names = sorted(depends_on)
    unknown = [name for name in names if name not in AXIS_NAMES and name not in DERIVED_KEY_PARTS]
    if unknown:
        raise KeyError(f"a cache key names {unknown}, no axis; axes: {', '.join(AXIS_NAMES)}, or {DERIVED_KEY_PARTS}")
    return (*((name, values[name]) for name in names), *sorted(settings.items()))
