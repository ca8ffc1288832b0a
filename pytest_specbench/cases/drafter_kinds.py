"""The drafter kinds, in one registry: what a pair's ``drafter = "..."`` can name, and all that follows from it.

A kind declares its settings (the keys of a ``[pairs.NAME]`` table it reads, each validated there), what it
supports (batches, sampling, k schedules, a draft with another tokenizer), how its drafter is built from the
loaded models (its cost is probed through the drafter's ``model``: none, no cost). A peer engine declares its own
method for each kind it runs (measure/engine.py ``Engine.methods``). Nothing outside this module asks which kind a
pair is: callers read :func:`kind_of`'s answer, or the built drafter's attributes (engine/drafters.py).

To add a kind: a :class:`~..engine.drafters.Drafter` in one module, and one :class:`DrafterKind` entry below
(docs/library.md, "Add a drafter kind").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..engine.names import DEFAULT_NGRAM_SIZE, DEFAULT_TRUNCATED_LAYERS

if TYPE_CHECKING:
    from ..engine.drafters import Drafter
    from ..models.loading import LoadedModel


class PairSpec(Protocol):
    """What a kind reads of a pair (cases/pairs.py's PairSpec, which validates its TOML against this registry)."""

    name: str
    target: str
    draft: str | None
    drafter: str
    drafter_options: tuple[tuple[str, Any], ...]
    cross_tokenizer: bool

    @property
    def options(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Setting:
    """A key of a pair's TOML table that a kind reads: an integer >= 1."""

    key: str
    meaning: str


@dataclass(frozen=True)
class DrafterKind:
    name: str
    meaning: str
    build: Callable[[PairSpec, LoadedModel, LoadedModel | None], Drafter]
    label: Callable[[PairSpec], str]
    settings: tuple[Setting, ...] = ()
    #: it drafts with a separate model, named by ``draft = "..."`` and loaded beside the target
    draft_model: bool = False
    #: a pair may mark its draft ``cross_tokenizer = true`` (another tokenizer): it then runs as :data:`CROSS`
    other_tokenizer: bool = False
    batch: bool = True
    sampling: bool = True
    #: k may be a schedule (auto, heuristic) on the native engine
    schedules: bool = True
    #: what follows the pair's name in a refusal, where it differs from "drafts with {meaning}"
    refused_as: str = ""

    def fingerprint(self, pair: PairSpec) -> dict[str, Any]:
        """The drafter's part of a case's inputs fingerprint: the kind as it runs, and its settings."""
        return {"kind": self.name, "options": sorted(pair.drafter_options)}


def _model(pair: PairSpec, target: LoadedModel, draft: LoadedModel | None) -> Drafter:
    from ..engine.drafters import ModelDrafter
    from ..models.tokenization import check_draft_vocabulary, check_same_tokenization

    check_same_tokenization(target.tokenizer, draft.tokenizer, pair.target, pair.draft)
    check_draft_vocabulary(target.model.config, draft.model.config, pair.target, pair.draft)
    return ModelDrafter(draft.model)


def _cross(pair: PairSpec, target: LoadedModel, draft: LoadedModel | None) -> Drafter:
    from ..engine.cross_tokenizer import CrossTokenizerDrafter

    return CrossTokenizerDrafter(draft.model, draft.tokenizer, target.tokenizer)  # ids never cross: no checks


def _truncated(pair: PairSpec, target: LoadedModel, draft: LoadedModel | None) -> Drafter:
    from ..engine import derived_models
    from ..engine.drafters import ModelDrafter
    from ..models.weight_pages import into_huge_pages

    layers = pair.options.get("num_layers", DEFAULT_TRUNCATED_LAYERS)
    draft = derived_models.truncated_copy(target.model, layers)
    if draft.device.type == "cpu":
        into_huge_pages(draft)  # its weights in the pages the target's are in: one page size on both sides
    return ModelDrafter(draft)


def _int8(pair: PairSpec, target: LoadedModel, draft: LoadedModel | None) -> Drafter:
    from ..engine import derived_models
    from ..engine.drafters import ModelDrafter

    return ModelDrafter(derived_models.int8_copy(target.model))


def _prompt_lookup(pair: PairSpec, target: LoadedModel, draft: LoadedModel | None) -> Drafter:
    from ..engine.drafters import PromptLookupDrafter

    options = pair.options
    return PromptLookupDrafter(options.get("ngram_size", DEFAULT_NGRAM_SIZE), options.get("max_proposal"))


KINDS: dict[str, DrafterKind] = {
    kind.name: kind
    for kind in (
        DrafterKind(
            "model",
            "a separate draft model (draft = ...)",
            _model,
            lambda pair: pair.draft or "",
            draft_model=True,
            other_tokenizer=True,
        ),
        DrafterKind(
            "truncated",
            "the target's first layers and its head",
            _truncated,
            lambda pair: f"{pair.target} first {pair.options.get('num_layers', DEFAULT_TRUNCATED_LAYERS)} layers",
            settings=(Setting("num_layers", f"layers kept (default {DEFAULT_TRUNCATED_LAYERS})"),),
        ),
        DrafterKind(
            "int8",
            "an int8 dynamic-quantised copy of the target",
            _int8,
            lambda pair: f"{pair.target} int8",
        ),
        DrafterKind(
            "prompt_lookup",
            "model-free n-gram lookup in the sequence so far",
            _prompt_lookup,
            lambda pair: "prompt lookup",
            settings=(
                Setting("ngram_size", f"longest n-gram matched (default {DEFAULT_NGRAM_SIZE})"),
                Setting("max_proposal", "tokens proposed at most per step (default: k)"),
            ),
        ),
    )
}

#: a draft model marked ``cross_tokenizer = true``: its drafts cross to the target as text (docs/pairs.md)
CROSS = DrafterKind(
    "cross_tokenizer",
    "a draft model with another tokenizer, its drafts re-tokenised as text",
    _cross,
    lambda pair: pair.draft or "",
    draft_model=True,
    batch=False,
    sampling=False,
    refused_as="'s draft has another tokenizer than its target (cross_tokenizer = true)",
)

#: the values ``drafter = "..."`` accepts
DRAFTER_KINDS: tuple[str, ...] = tuple(KINDS)
#: every setting key some kind reads
SETTING_KEYS: tuple[str, ...] = tuple(dict.fromkeys(s.key for kind in KINDS.values() for s in kind.settings))


def kind_of(pair: PairSpec) -> DrafterKind:
    """The kind a pair drafts with, as it runs: its declared kind, or :data:`CROSS` for a draft model with
    another tokenizer."""
    return CROSS if pair.cross_tokenizer else KINDS[pair.drafter]


def kind_refusal(pair: PairSpec, *, batch: int = 1, temperature: float = 0.0) -> str | None:
    """Why a case of ``pair`` at ``batch`` and ``temperature`` cannot run on any engine (it is skipped with the
    reason), or None; decided from the pair alone, before any model loads."""
    kind = kind_of(pair)
    why = f"pair {pair.name}{kind.refused_as or ' drafts with ' + kind.meaning}"
    if batch > 1 and not kind.batch:
        return f"{why}: it drafts one sequence at a time, so it runs at batch 1 only, not {batch}"
    if temperature > 0 and not kind.sampling:
        return (
            f"{why}: greedy only, so it does not run under sampling (--specbench-temperature={temperature:g}); "
            "the sampling acceptance rule needs the draft's probabilities over the target's tokens"
        )
    return None
