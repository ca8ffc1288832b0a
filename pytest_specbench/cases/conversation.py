"""A conversation prompt's text before each turn: the earlier turns and the target's own answers to them, joined
through the tokenizer's chat template where it has one, else by :data:`PLAIN_JOIN`.

Spec-Bench decodes a two-turn question the same way: the second turn's input holds the first turn and the
answer the model gave it. Here that answer is always the target's greedy one (its lossless reference), under
sampling too, so every case of a question decodes its later turns from the same input.
"""

from __future__ import annotations

from collections.abc import Sequence

#: how a model without a chat template reads a conversation: each turn after ``User:``, each answer after
#: ``Assistant:``, one line each; the text ends with ``Assistant:`` for the model to answer
PLAIN_JOIN = ("User: ", "\nAssistant:")


def has_chat_template(tokenizer) -> bool:
    """Whether ``tokenizer`` carries a chat template (an instruct model's)."""
    return bool(getattr(tokenizer, "chat_template", None))


def conversation_text(tokenizer, turns: Sequence[str], answers: Sequence[str]) -> str:
    """What the target reads before answering ``turns[len(answers)]``: the turns up to it, each earlier one
    followed by its answer. ``answers`` holds one answer per earlier turn."""
    if len(answers) >= len(turns):
        raise ValueError(f"{len(answers)} answers for {len(turns)} turns: the last turn must be unanswered")
    asked = turns[: len(answers) + 1]
    if has_chat_template(tokenizer):
        messages: list[dict[str, str]] = []
        for index, turn in enumerate(asked):
            messages.append({"role": "user", "content": turn})
            if index < len(answers):
                messages.append({"role": "assistant", "content": answers[index]})
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    user, assistant = PLAIN_JOIN
    parts = [
        f"{user}{turn}{assistant}" + (f" {answers[index]}\n" if index < len(answers) else "")
        for index, turn in enumerate(asked)
    ]
    return "".join(parts)


def answer_text(tokenizer, tokens: Sequence[int]) -> str:
    """A turn's answer as the next turn's input shows it: its tokens decoded, special tokens (an EOS) left out."""
    return tokenizer.decode(list(tokens), skip_special_tokens=True).strip()
