"""The prompt suite: loading, validating and selecting prompts, and fitting
them to a fixed context length.

A prompt file is JSON Lines: one object per line,
``{"id": "natural-01", "category": "natural", "text": "..."}``.
This module does not import pytest: the plugin maps its options onto these
plain functions, and scripts can use them directly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CATEGORIES",
    "DEFAULT_PROMPT_FILE",
    "FILLER_SEPARATOR",
    "Prompt",
    "PromptFileError",
    "case_label",
    "filler_text",
    "fit_context",
    "load_prompts",
    "select_prompts",
]

# Package data, so the shipped suite is found from a source checkout and from
# an installed wheel alike (pyproject must list data/*.jsonl as package data).
DEFAULT_PROMPT_FILE: Path = Path(__file__).resolve().parents[1] / "data" / "prompts.jsonl"

# The categories of the shipped suite, in the order the file lists them.
# A user's own prompt file may use other categories.
CATEGORIES: tuple[str, ...] = (
    "natural",
    "technical",
    "code",
    "repetitive",
    "dialogue",
    "wikipedia_style",
    "list_items",
    "repetitive_pattern",
    "code_python",
    "creative_fiction",
    "code_json",
    "technical_ml",
)

# Ids and categories end up in pytest node ids and are typed after ``-k``:
# letters, digits, '_' and '-' survive both. A leading letter or digit keeps a
# label from looking like a command-line option.
_LABEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
# Words that ``-k`` parses as operators, not as names.
_K_KEYWORDS = frozenset({"and", "or", "not"})
_LABEL_RULE = (
    "letters, digits, '_' and '-', starting with a letter or digit "
    "(not 'and', 'or' or 'not'), so that it can be used in a pytest -k expression"
)

_LINE_FORMAT = (
    'each prompt line must be one JSON object such as {"id": "natural-01", '
    '"category": "natural", "text": "..."}; "id" is optional, other keys are '
    "ignored, and blank lines and lines starting with '#' are skipped"
)


def _label_problem(value: str) -> str | None:
    """Why ``value`` cannot serve as an id or category, or None if it can."""
    if not _LABEL_RE.fullmatch(value) or value in _K_KEYWORDS:
        return f"{value!r} is not allowed; use {_LABEL_RULE}"
    return None


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt: an unfinished text for the model to continue."""

    id: str
    category: str
    text: str

    def __post_init__(self) -> None:
        # Checked here too, so prompts built in code obey the file's rules.
        for field_name in ("id", "category", "text"):
            if not isinstance(getattr(self, field_name), str):
                raise TypeError(f"Prompt.{field_name} must be a string")
        for field_name in ("id", "category"):
            problem = _label_problem(getattr(self, field_name))
            if problem:
                raise ValueError(f"Prompt.{field_name}: {problem}")
        if not self.text.strip():
            raise ValueError("Prompt.text must not be empty")


class PromptFileError(ValueError):
    """A prompt file that is missing, unreadable or malformed.

    The message reads ``<path>:<line>: <what is wrong>; <what is accepted>``
    (without ``:<line>`` when the problem is the file as a whole), so editors
    and terminals can jump to the offending line.
    """

    def __init__(self, path: Path, line: int | None, problem: str, accepted: str = _LINE_FORMAT):
        self.path = path
        self.line = line  # 1-based; None when the whole file is at fault
        self.problem = problem
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {problem}; {accepted}")


def _reject_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # json.loads would silently keep the last of two "text" keys; a duplicate
    # is almost always an editing mistake, so refuse it.
    obj: dict[str, object] = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"duplicate key {key!r}")
        obj[key] = value
    return obj


def _read_text(path: Path) -> str:
    if not path.exists():
        raise PromptFileError(path, None, "prompt file not found", "pass the path of an existing JSON Lines file")
    if not path.is_file():
        raise PromptFileError(path, None, "not a regular file", "pass the path of a JSON Lines file")
    data = path.read_bytes()
    try:
        # utf-8-sig: tolerate the byte-order mark some editors write.
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise PromptFileError(
            path, line, f"invalid UTF-8 ({exc.reason})", "prompt files must be UTF-8 encoded"
        ) from None
    # Normalise line endings ourselves; str.splitlines would also split on
    # characters such as U+2028 that may legally appear inside a JSON string.
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _parse_line(path: Path, lineno: int, line: str) -> dict[str, object]:
    try:
        obj = json.loads(line, object_pairs_hook=_reject_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise PromptFileError(path, lineno, f"invalid JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:  # from _reject_duplicate_keys
        raise PromptFileError(path, lineno, str(exc)) from None
    if not isinstance(obj, dict):
        raise PromptFileError(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
    return obj


_UNICODE_RULE = (
    "prompt text must be valid Unicode: write the character itself, or a full surrogate pair such as "
    '"\\ud83d\\ude00" for one character outside the Basic Multilingual Plane'
)


def _unencodable(text: str) -> str | None:
    """What in ``text`` no tokenizer can encode (a lone surrogate from a JSON escape), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"holds the lone surrogate \\u{ord(text[exc.start]):04x} at character {exc.start + 1}"
    return None


def _string_field(path: Path, lineno: int, obj: dict[str, object], key: str) -> str | None:
    if key not in obj:
        return None
    value = obj[key]
    if not isinstance(value, str):
        raise PromptFileError(path, lineno, f'"{key}" must be a string, got {type(value).__name__}')
    return value


def _category_and_text(path: Path, lineno: int, obj: dict[str, Any]) -> tuple[str, str]:
    """A record's category and text, each checked; a fault is a PromptFileError naming the line."""
    category = _string_field(path, lineno, obj, "category")
    if category is None:
        raise PromptFileError(path, lineno, 'missing "category"')
    problem = _label_problem(category)
    if problem:
        raise PromptFileError(path, lineno, f'bad "category": {problem}')

    body = _string_field(path, lineno, obj, "text")
    if body is None:
        raise PromptFileError(path, lineno, 'missing "text"')
    if not body.strip():
        raise PromptFileError(path, lineno, '"text" is empty')
    problem = _unencodable(body)
    if problem:
        raise PromptFileError(path, lineno, f'"text" {problem}', _UNICODE_RULE)
    return category, body


def load_prompts(path: str | Path | None = None) -> list[Prompt]:
    """Load a JSON Lines prompt file, in file order (None: the shipped suite).

    Raises PromptFileError (a ValueError) naming the file and the 1-based
    line of the first problem.
    """
    path = DEFAULT_PROMPT_FILE if path is None else Path(path).expanduser()
    text = _read_text(path)

    prompts: list[Prompt] = []
    id_lines: dict[str, int] = {}
    per_category: dict[str, int] = {}
    # Split on "\n" only: JSON strings cannot hold a raw newline, so every
    # physical line is one record and line numbers match what editors show.
    for lineno, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        obj = _parse_line(path, lineno, line)

        category, body = _category_and_text(path, lineno, obj)

        # n counts every prompt of this category so far, so a derived id says
        # where the prompt sits in its category even when others have ids.
        n = per_category[category] = per_category.get(category, 0) + 1
        prompt_id = _string_field(path, lineno, obj, "id")
        if prompt_id is None:
            prompt_id = f"{category}-{n:02d}"
        else:
            problem = _label_problem(prompt_id)
            if problem:
                raise PromptFileError(path, lineno, f'bad "id": {problem}')
        if prompt_id in id_lines:
            raise PromptFileError(
                path,
                lineno,
                f"duplicate id {prompt_id!r} (first used on line {id_lines[prompt_id]})",
                'ids must be unique; a prompt without "id" gets "<category>-<NN>", '
                "NN being its 1-based position within its category",
            )
        id_lines[prompt_id] = lineno

        # Text is kept exactly as written: leading/trailing whitespace changes
        # the tokens the model sees.
        prompts.append(Prompt(id=prompt_id, category=category, text=body))

    if not prompts:
        raise PromptFileError(path, None, "no prompts in file")
    return prompts


def _categories_in_order(prompts: Sequence[Prompt]) -> list[str]:
    return list(dict.fromkeys(p.category for p in prompts))


def select_prompts(
    prompts: Sequence[Prompt],
    categories: Sequence[str] | None,
    per_category: int | None = None,
) -> list[Prompt]:
    """Keep the prompts of ``categories`` (None: all), in the order of ``prompts``.

    ``per_category`` keeps only the first N prompts of each category.
    An unknown category raises ValueError listing the categories ``prompts``
    has (a user file may define its own).
    """
    if isinstance(categories, str):
        # A bare string is a Sequence[str] too, and would select 'c', 'o', ...
        raise TypeError(f"categories must be a sequence of names, not the string {categories!r}")
    if per_category is not None and per_category < 1:
        raise ValueError(f"per_category must be at least 1, got {per_category}")

    available = _categories_in_order(prompts)
    if categories is None:
        wanted = set(available)
    else:
        if not categories:
            raise ValueError("no categories given; pass None to select all categories")
        unknown = [c for c in dict.fromkeys(categories) if c not in available]
        if unknown:
            raise ValueError(
                f"unknown prompt categor{'y' if len(unknown) == 1 else 'ies'} "
                f"{', '.join(map(repr, unknown))}; available: {', '.join(available)}"
            )
        wanted = set(categories)

    kept: list[Prompt] = []
    counts: dict[str, int] = {}
    for prompt in prompts:
        if prompt.category not in wanted:
            continue
        counts[prompt.category] = counts.get(prompt.category, 0) + 1
        if per_category is None or counts[prompt.category] <= per_category:
            kept.append(prompt)
    return kept


def case_label(prompt: Prompt, single_per_category: bool) -> str:
    """The prompt's part of a pytest id.

    With one prompt per category the category alone is unambiguous and
    reads better (``code_python``); otherwise the prompt id (``code_python-02``).
    Both are safe in ``-k`` expressions (checked when the Prompt is built).
    """
    return prompt.category if single_per_category else prompt.id


# Paragraph break between filler texts: the padding ends with it, so the
# prompt starts after a clean boundary instead of mid-sentence.
FILLER_SEPARATOR = "\n\n"


def filler_text(prompts: Sequence[Prompt], exclude_id: str) -> str:
    """The texts of all prompts except ``exclude_id``, in the given order,
    each followed by a paragraph break; "" when no other prompt exists.

    Used as padding for prompts shorter than the benchmarked context. Other
    prompts of the suite keep the padding natural text, and excluding the
    prompt itself keeps the model from copying its own continuation.
    """
    return "".join(p.text + FILLER_SEPARATOR for p in prompts if p.id != exclude_id)


def fit_context(prompt_ids: list[int], context_tokens: int, filler_ids: list[int]) -> list[int]:
    """Return exactly ``context_tokens`` token ids ending with the prompt.

    - Longer prompt: keep its last ``context_tokens`` ids (the end is what the
      model continues).
    - Shorter prompt: prepend padding cut from ``filler_ids`` repeated as often
      as needed. The padding is the *tail* of that repetition, so it ends
      exactly where ``filler_ids`` ends (e.g. on a paragraph break) and the
      prompt follows it unchanged.

    Pass ids without special tokens; a BOS token, if any, is the caller's.
    """
    if context_tokens < 1:
        raise ValueError(f"context_tokens must be at least 1, got {context_tokens}")
    if len(prompt_ids) >= context_tokens:
        return list(prompt_ids[len(prompt_ids) - context_tokens :])
    missing = context_tokens - len(prompt_ids)
    if not filler_ids:
        raise ValueError(
            f"the prompt has {len(prompt_ids)} tokens, fewer than context_tokens={context_tokens}, "
            "and filler_ids is empty: nothing to pad with"
        )
    repeats = -(-missing // len(filler_ids))  # ceiling division
    padding = (list(filler_ids) * repeats)[len(filler_ids) * repeats - missing :]
    return padding + list(prompt_ids)
