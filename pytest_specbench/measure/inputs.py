"""A case's input: its prompt tokenised (padded or cut to a fixed length when asked), checked against the
context windows of the models that will read it."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from ..cases.conversation import conversation_text, has_chat_template
from ..cases.matrix import Case
from ..cases.prompts import Prompt, filler_text, fit_context
from ..models.base import UnrunnableCase, context_window


def prompt_input_ids(
    tokenizer,
    prompt: Prompt,
    all_prompts: list[Prompt],
    context_tokens: int | None,
    device: str,
    answers: tuple[str, ...] = (),
) -> torch.Tensor:
    """Tokenise a prompt, padded or cut to ``context_tokens`` (special tokens included) when asked. A conversation
    prompt is its turn after ``answers`` (the earlier turns' answers) in conversation form (:mod:`.conversation`)."""
    text = conversation_text(tokenizer, prompt.turns, answers) if prompt.conversation else prompt.text
    plain = tokenizer(text, add_special_tokens=False).input_ids
    # A chat template writes its own special tokens (a BOS) into the text.
    full = plain if prompt.conversation and has_chat_template(tokenizer) else tokenizer(text).input_ids
    # Leading special tokens (a BOS) stay in front of any padding.
    lead = full[: len(full) - len(plain)] if full[len(full) - len(plain) :] == plain else []
    if context_tokens is not None:
        filler = tokenizer(filler_text(all_prompts, exclude_id=prompt.id), add_special_tokens=False).input_ids
        plain = _fitted(plain, max(context_tokens - len(lead), 1), filler)
        full = lead + plain
    return torch.tensor([full], dtype=torch.long, device=device)


def _fitted(plain: list[int], length: int, filler: list[int]) -> list[int]:
    """``plain`` padded or cut to ``length``; with no other prompt to pad with (a file of one prompt), a shorter
    one keeps its own length, so --specbench-context-tokens only cuts: the cut the window advice asks for must work
    for a one-question file, whose first turn is shorter than its second."""
    if not filler:
        return plain[-length:]
    return fit_context(plain, length, filler)


def check_context_windows(case: Case, prompt_tokens: int, new_tokens: int, models: dict[str, PreTrainedModel]) -> None:
    """Raise :class:`UnrunnableCase` when the prompt and the new tokens need more positions than a model has.

    ``models`` maps a role and source ("target 'gpt2'") to the model. The engine never feeds a
    position past the last new token (each draft block is cut to what is left), so
    prompt + new tokens is what must fit, whatever k is.
    """
    needed = prompt_tokens + new_tokens
    for role, model in models.items():
        window = context_window(model.config)
        if window is None or needed <= window[0]:
            continue
        limit, attribute = window
        if prompt_tokens >= limit:  # not one new token fits: no --specbench-max-new-tokens alone would help
            prompt = (
                f"the prompts of batch {case.batch}, padded to its longest row,"
                if case.batched
                else f"the prompt {case.prompt.id!r}"
            )
            helps = (
                f"cut the prompts with --specbench-context-tokens={limit - new_tokens} (or fewer)"
                if limit > new_tokens
                else f"lower --specbench-max-new-tokens below {limit} and cut the prompts with "
                "--specbench-context-tokens"
            )
            raise UnrunnableCase(
                f"case {case.id}: {prompt} alone ({prompt_tokens} tokens) does not fit in the {role} context "
                f"window ({attribute} = {limit}), which leaves no position for a new token; use a shorter "
                f"prompt, or {helps}"
            )
        longest_prompt = limit - new_tokens
        shorten = (
            f"cut the prompts with --specbench-context-tokens={longest_prompt} (or fewer)"
            if longest_prompt >= 1
            else ""
        )
        fewer = f"lower --specbench-max-new-tokens to {limit - prompt_tokens} or less"
        raise UnrunnableCase(
            f"case {case.id}: the prompt ({prompt_tokens} tokens) and {new_tokens} new tokens need {needed} "
            f"positions, more than the {role} allows ({attribute} = {limit}); "
            f"{' or '.join(part for part in (shorten, fewer) if part)}"
        )
