"""The drafter kinds, in one registry: what a pair's ``drafter = "..."`` can name, and all that follows from it.

A kind declares its settings (the keys of a ``[pairs.NAME]`` table it reads, each validated there), what it
supports (batches, sampling, k schedules, a draft with another tokenizer), how its drafter is built from the
loaded models (its cost is probed through the drafter's ``model``: none, no cost), and its method in each peer
engine or why it has none. Nothing outside this module asks which kind a pair is: callers read
:func:`kind_of`'s answer, or the built drafter's attributes (engine/drafters.py).

To add a kind: a :class:`~..engine.drafters.Drafter` in one module, and one :class:`DrafterKind` entry below
(docs/library.md, "Add a drafter kind").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..engine.names import DEFAULT_NGRAM_SIZE, DEFAULT_TRUNCATED_LAYERS

if TYPE_CHECKING:
    from ..engine.drafters import Drafter
    from ..models.loading import LoadedModel


class PairSpec(Protocol):
    """What a kind reads of a pair (measure/pairs.py's PairSpec, which validates its TOML against this registry)."""

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
class PeerMethod:
    """The method a peer engine runs a kind with; ``integer_k_only`` where that method has no k schedule."""

    name: str
    integer_k_only: bool = False
    #: a served engine's speculative config for the pair at k (its draft model's folder, where it has one)
    server_config: Callable[[PairSpec, int, Path | None], dict[str, Any]] | None = None


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
    #: per peer engine, its method there, or why it has none (the case is skipped with that reason)
    peers: Mapping[str, PeerMethod | str] = field(default_factory=dict)
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


_ASSISTANT = PeerMethod("assisted generation (assistant_model)")
#: vLLM's speculative methods by the names its ``speculative_config`` takes
VLLM_DRAFT_MODEL, VLLM_NGRAM = "draft_model", "ngram"


def _vllm_ngram(pair: PairSpec, k: int, draft_folder: Path | None) -> dict[str, Any]:
    # The native lookup tries the longest n-gram first, down to one token.
    longest = pair.options.get("ngram_size", DEFAULT_NGRAM_SIZE)
    return {"method": VLLM_NGRAM, "num_speculative_tokens": k, "prompt_lookup_max": longest, "prompt_lookup_min": 1}


def _vllm_draft_model(pair: PairSpec, k: int, draft_folder: Path | None) -> dict[str, Any]:
    return {"method": VLLM_DRAFT_MODEL, "model": str(draft_folder), "num_speculative_tokens": k}


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
            peers={
                "hf": _ASSISTANT,
                "vllm": PeerMethod(VLLM_DRAFT_MODEL, integer_k_only=True, server_config=_vllm_draft_model),
            },
        ),
        DrafterKind(
            "truncated",
            "the target's first layers and its head",
            _truncated,
            lambda pair: f"{pair.target} first {pair.options.get('num_layers', DEFAULT_TRUNCATED_LAYERS)} layers",
            settings=(Setting("num_layers", f"layers kept (default {DEFAULT_TRUNCATED_LAYERS})"),),
            peers={"hf": _ASSISTANT},
        ),
        DrafterKind(
            "int8",
            "an int8 dynamic-quantised copy of the target",
            _int8,
            lambda pair: f"{pair.target} int8",
            peers={"hf": _ASSISTANT},
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
            peers={
                "hf": PeerMethod("prompt lookup", integer_k_only=True),
                "vllm": PeerMethod(VLLM_NGRAM, integer_k_only=True, server_config=_vllm_ngram),
            },
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
    peers={"hf": PeerMethod("universal assisted generation")},
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


def peer_method(pair: PairSpec, engine: str) -> PeerMethod | str:
    """The method ``engine`` (a peer engine) runs the pair's kind with, or why it has none."""
    kind = kind_of(pair)
    return kind.peers.get(engine, f"{engine} has no method for {kind.meaning} (pair {pair.name})")
