"""The peer engine: the same case through transformers' own assisted generation.

``hf_assisted_generate`` runs ``target.generate`` greedily with the draft model as ``assistant_model`` (or
``prompt_lookup_num_tokens`` for prompt lookup) and returns the same :class:`~.stats.GenerationResult` as the
native engine. Its counts are read from what ``generate`` did, never assumed: a hook on the target records each
forward pass, from which every step's drafted and accepted tokens follow; a hook on the draft counts and times its
passes. transformers 5 reads the draft length, schedule and confidence threshold from the *assistant's*
``generation_config``, so they are set there for the call and restored after it: the ``"heuristic"`` schedule
writes its final length back there, and each timed run would otherwise start where the last ended. See
docs/engines.md, "Engines side by side".
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch
from transformers import PreTrainedModel

from ..kernels.timing import DeviceClock
from .drafters import Drafter, as_drafter
from .forward_log import ForwardLog
from .names import AUTO, HEURISTIC
from .plain_generate import plain_generate, plain_generation_config
from .sampling import SamplingParams
from .stats import DecodeStats, GenerationResult

__all__ = ["hf_assisted_generate", "hf_schedule_settings", "universal_assisted_refusal"]

_ASSISTANT_KNOBS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


def hf_schedule_settings(k: int | str) -> dict[str, object] | None:
    """The assistant's generation-config values for a case's k; None keeps the assistant's own (``auto``).

    An integer k: a constant draft length with the confidence threshold off, as this engine's
    constant k. ``heuristic``: transformers' heuristic schedule from 20 tokens with its 0.4
    confidence threshold, reset per call (``heuristic_transient``). ``auto``: whatever the
    assistant's config says, which for a model that sets nothing is transformers' default
    (in 5.x: 20 tokens, constant, confidence threshold 0.4).
    """
    if k == AUTO:
        return None
    if k == HEURISTIC:
        return {
            "num_assistant_tokens": 20,
            "num_assistant_tokens_schedule": "heuristic_transient",
            "assistant_confidence_threshold": 0.4,
        }
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, {AUTO!r} or {HEURISTIC!r}, got {k!r}")
    return {
        "num_assistant_tokens": k,
        "num_assistant_tokens_schedule": "constant",
        "assistant_confidence_threshold": 0.0,
    }


@contextlib.contextmanager
def _temporarily(model: PreTrainedModel, settings: dict[str, object]) -> Iterator[None]:
    """Set attributes of ``model.generation_config`` for the call; put the old values back after it."""
    config = model.generation_config
    saved = {knob: getattr(config, knob, None) for knob in settings}
    try:
        for knob, value in settings.items():
            setattr(config, knob, value)
        yield
    finally:
        for knob, value in saved.items():
            setattr(config, knob, value)


def _step_counts(calls: Sequence, prompt_length: int, final_length: int) -> tuple[list[int], list[int]]:
    """Drafted and accepted tokens per target pass, from the positions each pass fed onto its cache.

    Before step i the sequence holds c_i committed tokens: the prompt before the first pass, then
    one more than the cache (the newest token is fed again with the draft block). A pass that
    starts on a cache of s positions and feeds f drafted d = s + f - c_i tokens; the next step's
    c_(i+1) (or the final length) says it committed a_i + 1, so it accepted a_i.
    """
    committed = [prompt_length] + [call.cached + 1 for call in calls[1:]] + [final_length]
    drafted = [call.cached + call.fed - committed[i] for i, call in enumerate(calls)]
    accepted = [committed[i + 1] - committed[i] - 1 for i in range(len(calls))]
    return drafted, accepted


#: the assistant's schedule settings (None: none) and generate()'s arguments for a drafter
_Drafting = tuple[dict[str, object] | None, dict[str, object]]


def _prompt_lookup_settings(config, drafter: Drafter, k: int | str, target, sampling) -> _Drafting:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(
            f"transformers' prompt lookup has no draft-length schedule; k must be an integer >= 1, got {k!r}"
        )
    config.prompt_lookup_num_tokens = k
    config.max_matching_ngram_size = drafter.ngram_size
    return None, {}


def _assistant_settings(config, drafter: Drafter, k: int | str, target, sampling) -> _Drafting:
    return hf_schedule_settings(k), {"assistant_model": drafter.model}


def _universal_settings(config, drafter: Drafter, k: int | str, target, sampling) -> _Drafting:
    settings, kwargs = _assistant_settings(config, drafter, k, target, sampling)
    return settings, {**kwargs, **_universal_assisted_kwargs(target, drafter, sampling)}


#: how transformers runs each way of drafting it has (``Drafter.assisted_by``): prompt lookup's knobs set on the
#: generation config; an assistant model with its schedule; universal assisted generation, with both tokenizers
ASSISTED_METHODS: dict[str, Callable[..., _Drafting]] = {
    "prompt_lookup": _prompt_lookup_settings,
    "assistant_model": _assistant_settings,
    "universal": _universal_settings,
}


@torch.inference_mode()
def _drafting_settings(config, drafter: Drafter, k: int | str, target, sampling) -> _Drafting:
    """Set prompt lookup's knobs on ``config``, or return the assistant's schedule settings and generate()'s
    arguments, by how transformers runs the drafter (:data:`ASSISTED_METHODS`)."""
    method = ASSISTED_METHODS.get(drafter.assisted_by or "")
    if method is None:
        raise TypeError(f"the hf engine needs a draft model or prompt lookup, got {type(drafter).__name__}")
    return method(config, drafter, k, target, sampling)


def _stats_from_logs(
    calls: list, draft_log: ForwardLog, prompt_length: int, length: int, start: float, end: float
) -> DecodeStats:
    """The run's statistics as the target's forward passes show them (transformers reports no per-step counts)."""
    drafted, accepted = _step_counts(calls, prompt_length, length)
    stats = DecodeStats()
    stats.new_tokens = length - prompt_length
    stats.target_forward_passes = len(calls)
    stats.draft_forward_passes = len(draft_log.calls)
    stats.drafted_per_step, stats.accepted_per_step = drafted, accepted
    stats.k_per_step = list(drafted)  # what it drafted: transformers' own choice is not observable
    stats.drafted_tokens, stats.accepted_tokens = sum(drafted), sum(accepted)
    stats.bonus_tokens = stats.new_tokens - stats.accepted_tokens
    stats.wall_time_s = end - start
    if calls:
        first_end = calls[0].end_s
        stats.prefill_time_s = first_end - start
        stats.prefill_tokens = accepted[0] + 1
        stats.verify_time_s = sum(call.seconds for call in calls[1:])
        stats.draft_time_s = draft_log.seconds_after(first_end)
    return stats


def universal_assisted_refusal(target: PreTrainedModel, drafter: Drafter) -> str | None:
    """Why transformers' universal assisted generation cannot run this pair, or None: it takes two equal
    vocab_sizes for one shared tokenizer and refuses ``assistant_tokenizer`` then."""
    target_size = target.config.get_text_config().vocab_size
    if drafter.model.config.get_text_config().vocab_size != target_size:
        return None
    return (
        f"transformers' universal assisted generation refuses a draft whose vocab_size equals the target's "
        f"({target_size}): it takes equal sizes for one shared tokenizer; run this pair on the native engine"
    )


def _universal_assisted_kwargs(
    target: PreTrainedModel, drafter: Drafter, sampling: SamplingParams | None
) -> dict[str, object]:
    """generate()'s tokenizers for transformers' universal assisted generation (a draft with its own tokenizer)."""
    if sampling is not None and not sampling.greedy:
        raise ValueError("cross-tokenizer drafting is greedy only, on this engine as on the native one")
    refusal = universal_assisted_refusal(target, drafter)
    if refusal:
        raise ValueError(refusal)
    return {"tokenizer": drafter.target_tokenizer, "assistant_tokenizer": drafter.draft_tokenizer}


def hf_assisted_generate(
    target: PreTrainedModel,
    drafter: Drafter | PreTrainedModel,
    input_ids: torch.Tensor,
    k: int | str,
    max_new_tokens: int,
    *,
    eos_token_id: int | None = None,
    sampling: SamplingParams | None = None,
    seed: int | None = None,
) -> GenerationResult:
    """Assisted generation by transformers, measured like :func:`~.decoding.speculative_generate`.

    Greedy, or with ``sampling`` transformers' speculative sampling (``do_sample=True`` with the same
    temperature, top-p and top-k); transformers draws from torch's global generator, which ``seed``
    seeds just before the call.

    ``k`` is an integer (constant draft length), ``"heuristic"`` or ``"auto"`` (see
    :func:`hf_schedule_settings`); prompt lookup takes an integer k only (transformers has no
    schedule for it) and uses the drafter's n-gram size. A :class:`~.cross_tokenizer.CrossTokenizerDrafter` runs
    transformers' universal assisted generation (greedy only; the two vocab_sizes must differ). The first
    target pass reads the prompt and verifies the first draft block at once; it counts as the prefill step,
    and every token it commits as prefill tokens.
    """
    ids = torch.as_tensor(input_ids, dtype=torch.long).reshape(1, -1).to(target.device)
    prompt_length = ids.shape[1]
    config = plain_generation_config(target, max_new_tokens, eos_token_id, sampling)
    drafter = as_drafter(drafter)
    draft_model = drafter.model
    if draft_model is target:
        raise ValueError(
            "the draft is the target itself (one model object): its forward passes could not be "
            "told from the target's; pass a copy of it as the draft"
        )
    settings, kwargs = _drafting_settings(config, drafter, k, target, sampling)

    clock = DeviceClock(target.device)
    draft_log = ForwardLog()
    with contextlib.ExitStack() as stack:
        target_log = stack.enter_context(ForwardLog.attached(target))
        if "assistant_model" in kwargs:
            draft_log = stack.enter_context(ForwardLog.attached(draft_model))
            # Saved and restored even under "auto", which sets nothing: transformers' heuristic schedule
            # writes its final draft length back into the assistant's config.
            stack.enter_context(
                _temporarily(
                    draft_model,
                    settings or {knob: getattr(draft_model.generation_config, knob, None) for knob in _ASSISTANT_KNOBS},
                )
            )
        if seed is not None:
            torch.manual_seed(seed)
        start = clock.now()
        sequences = plain_generate(target, ids, torch.ones_like(ids), config, **kwargs)
        end = clock.now()

    stats = _stats_from_logs(target_log.calls, draft_log, prompt_length, sequences.shape[1], start, end)
    return GenerationResult(sequences=sequences, prompt_length=prompt_length, stats=stats)
