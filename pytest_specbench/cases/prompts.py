"""The prompt suite: loading, validating and selecting prompts, and fitting
them to a fixed context length.

A prompt file is JSON Lines: one object per line, either this project's
``{"id": "natural-01", "category": "natural", "text": "..."}`` or a question of
Spec-Bench's and MT-bench's ``question.jsonl``,
``{"question_id": 81, "category": "writing", "turns": ["...", "..."]}``.
This module does not import pytest: the plugin maps its options onto these
plain functions, and scripts can use them directly.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..settings.options import CATEGORY_GROUPINGS

__all__ = [
    "CATEGORIES",
    "CATEGORY_GROUPINGS",
    "CATEGORY_GROUPS",
    "MT_BENCH_CATEGORIES",
    "MT_BENCH_GROUP",
    "category_group",
    "DEFAULT_PROMPT_FILE",
    "FILLER_SEPARATOR",
    "Prompt",
    "PromptFileError",
    "case_label",
    "filler_text",
    "fit_context",
    "load_prompts",
    "sample_line",
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

# Spec-Bench's data/spec_bench/question.jsonl and MT-bench's question.jsonl share this format.
_QUESTION_FORMAT = (
    "a question line must be one JSON object of Spec-Bench's or MT-bench's question.jsonl format, such as "
    '{"question_id": 81, "category": "writing", "turns": ["...", "..."]}: "turns" a list of one or more '
    'non-empty strings, asked in order; "reference" and other keys are ignored'
)
_EITHER_FORMAT = (
    'each line must be one JSON object in one of two formats: a prompt such as {"id": "natural-01", '
    '"category": "natural", "text": "..."} ("id" optional), or a question of Spec-Bench\'s or MT-bench\'s '
    'question.jsonl such as {"question_id": 81, "category": "writing", "turns": ["...", "..."]}; other keys are '
    "ignored"
)
_ID_RULE = (
    "an integer >= 0, or a string of letters, digits, '_' and '-' starting with a letter or digit "
    '(the prompt id is "<category>-<question_id>", part of a pytest id)'
)


def _label_problem(value: str) -> str | None:
    """Why ``value`` cannot serve as an id or category, or None if it can."""
    if not _LABEL_RE.fullmatch(value) or value in _K_KEYWORDS:
        return f"{value!r} is not allowed; use {_LABEL_RULE}"
    return None


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt: an unfinished text for the model to continue, or (``conversation``) a question of
    Spec-Bench's or MT-bench's format, put to the model as a chat turn by turn. ``text`` is the first turn."""

    id: str
    category: str
    text: str
    later_turns: tuple[str, ...] = ()  # a conversation's turns after the first, each asked after the target's answer
    conversation: bool = False

    @property
    def turns(self) -> tuple[str, ...]:
        """Every turn, the first (``text``) included."""
        return (self.text, *self.later_turns)

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
        if self.later_turns and not self.conversation:
            raise ValueError("Prompt.later_turns needs conversation=True: only a chat has turns")
        if not all(isinstance(turn, str) and turn.strip() for turn in self.later_turns):
            raise ValueError("Prompt.later_turns must be non-empty strings")


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
        if exc.msg.startswith("Invalid control character"):  # its message ends "at", then the column
            code = ord(line[exc.pos]) if exc.pos < len(line) else 0
            raise PromptFileError(
                path,
                lineno,
                f"invalid JSON (a raw control character, U+{code:04X}, at column {exc.colno})",
                f'JSON strings hold control characters escaped ("\\u{code:04x}"); write it so, or leave it out',
            ) from None
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


def _string_field(
    path: Path, lineno: int, obj: dict[str, object], key: str, accepted: str = _LINE_FORMAT
) -> str | None:
    if key not in obj:
        return None
    value = obj[key]
    if not isinstance(value, str):
        raise PromptFileError(path, lineno, f'"{key}" must be a string, got {type(value).__name__}', accepted)
    return value


def _category(path: Path, lineno: int, obj: dict[str, Any], accepted: str) -> str:
    """A record's category, checked; a fault is a PromptFileError naming the line."""
    category = _string_field(path, lineno, obj, "category", accepted)
    if category is None:
        raise PromptFileError(path, lineno, 'missing "category"', accepted)
    problem = _label_problem(category)
    if problem:
        raise PromptFileError(path, lineno, f'bad "category": {problem}', accepted)
    return category


def _category_and_text(path: Path, lineno: int, obj: dict[str, Any]) -> tuple[str, str]:
    """A record's category and text, each checked; a fault is a PromptFileError naming the line."""
    category = _category(path, lineno, obj, _LINE_FORMAT)
    body = _string_field(path, lineno, obj, "text")
    if body is None:
        raise PromptFileError(path, lineno, 'missing "text"')
    if not body.strip():
        raise PromptFileError(path, lineno, '"text" is empty')
    problem = _unencodable(body)
    if problem:
        raise PromptFileError(path, lineno, f'"text" {problem}', _UNICODE_RULE)
    return category, body


def _question_id(path: Path, lineno: int, obj: dict[str, Any]) -> str:
    """A question's ``question_id`` as the label it adds to the prompt id."""
    if "question_id" not in obj:
        raise PromptFileError(path, lineno, 'missing "question_id"', _QUESTION_FORMAT)
    value = obj["question_id"]
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise PromptFileError(
            path, lineno, f'"question_id" must be an integer or a string, got {type(value).__name__}', _QUESTION_FORMAT
        )
    if not _LABEL_RE.fullmatch(str(value)):
        raise PromptFileError(path, lineno, f'bad "question_id": {value!r} is not allowed', f"use {_ID_RULE}")
    return str(value)


def _turns(path: Path, lineno: int, obj: dict[str, Any]) -> list[str]:
    """A question's turns, each a non-empty string a tokenizer can encode."""
    turns = obj["turns"]
    if not isinstance(turns, list):
        raise PromptFileError(
            path, lineno, f'"turns" must be a list of strings, got {type(turns).__name__}', _QUESTION_FORMAT
        )
    if not turns:
        raise PromptFileError(path, lineno, '"turns" is empty', _QUESTION_FORMAT)
    for index, turn in enumerate(turns):
        where = f'"turns[{index}]" (turn {index + 1})'
        if not isinstance(turn, str):
            raise PromptFileError(
                path, lineno, f"{where} must be a string, got {type(turn).__name__}", _QUESTION_FORMAT
            )
        if not turn.strip():
            raise PromptFileError(path, lineno, f"{where} is empty", _QUESTION_FORMAT)
        problem = _unencodable(turn)
        if problem:
            raise PromptFileError(path, lineno, f"{where} {problem}", _UNICODE_RULE)
    return turns


def _question(path: Path, lineno: int, obj: dict[str, Any]) -> Prompt:
    """A Spec-Bench/MT-bench question as a conversation: its first turn the text, the others its later turns."""
    category = _category(path, lineno, obj, _QUESTION_FORMAT)
    question_id = _question_id(path, lineno, obj)
    turns = _turns(path, lineno, obj)
    return Prompt(
        id=f"{category}-{question_id}",
        category=category,
        text=turns[0],
        later_turns=tuple(turns[1:]),
        conversation=True,
    )


def _prompt(path: Path, lineno: int, obj: dict[str, Any], per_category: dict[str, int]) -> Prompt:
    """A line of this project's format; ``per_category`` counts the prompts of each category before it."""
    category, body = _category_and_text(path, lineno, obj)
    prompt_id = _string_field(path, lineno, obj, "id")
    if prompt_id is None:
        prompt_id = f"{category}-{per_category.get(category, 0) + 1:02d}"
    else:
        problem = _label_problem(prompt_id)
        if problem:
            raise PromptFileError(path, lineno, f'bad "id": {problem}')
    # Text is kept exactly as written: leading/trailing whitespace changes the tokens the model sees.
    return Prompt(id=prompt_id, category=category, text=body)


def _record(path: Path, lineno: int, obj: dict[str, Any], per_category: dict[str, int]) -> Prompt:
    """The prompt of one line, its format told by its fields: "turns" a question, "text" this project's."""
    has_text, has_turns = "text" in obj, "turns" in obj
    if has_text and has_turns:
        raise PromptFileError(
            path, lineno, 'both "text" and "turns": a line is a prompt ("text") or a question ("turns")', _EITHER_FORMAT
        )
    if not has_text and not has_turns:
        raise PromptFileError(path, lineno, 'missing "text" (a prompt) or "turns" (a question)', _EITHER_FORMAT)
    prompt = _question(path, lineno, obj) if has_turns else _prompt(path, lineno, obj, per_category)
    # Every prompt of the category so far counts, so a derived id says where the prompt sits in its category.
    per_category[prompt.category] = per_category.get(prompt.category, 0) + 1
    return prompt


def load_prompts(path: str | Path | None = None) -> list[Prompt]:
    """Load a JSON Lines prompt file, in file order (None: the shipped suite).

    Each line is a prompt of this project's format (``{"id"?, "category", "text"}``) or a question of
    Spec-Bench's and MT-bench's ``question.jsonl`` (``{"question_id", "category", "turns"}``), told apart by its
    fields. Raises PromptFileError (a ValueError) naming the file and the 1-based line of the first problem.
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
        prompt = _record(path, lineno, obj, per_category)
        if prompt.id in id_lines:
            _duplicate(path, lineno, prompt, id_lines[prompt.id])
        id_lines[prompt.id] = lineno
        prompts.append(prompt)

    if not prompts:
        raise PromptFileError(path, None, "no prompts in file")
    return prompts


def _duplicate(path: Path, lineno: int, prompt: Prompt, first: int) -> None:
    if prompt.conversation:
        raise PromptFileError(
            path,
            lineno,
            f'duplicate "question_id": the id {prompt.id!r} it gives was first used on line {first}',
            'ids must be unique; a question\'s id is "<category>-<question_id>"',
        )
    raise PromptFileError(
        path,
        lineno,
        f"duplicate id {prompt.id!r} (first used on line {first})",
        'ids must be unique; a prompt without "id" gets "<category>-<NN>", '
        "NN being its 1-based position within its category",
    )


#: MT-bench's eight categories, which Spec-Bench's ``speed.py`` reports as one group
MT_BENCH_CATEGORIES: tuple[str, ...] = (
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "stem",
    "humanities",
)
MT_BENCH_GROUP = "mt_bench"


def category_group(category: str, grouping: str = "spec_bench") -> str:
    """The group ``category`` is reported in under ``grouping`` (one of :data:`CATEGORY_GROUPINGS`)."""
    if grouping not in CATEGORY_GROUPINGS:
        raise ValueError(f"unknown category grouping {grouping!r}; use one of {', '.join(CATEGORY_GROUPINGS)}")
    return MT_BENCH_GROUP if grouping == "spec_bench" and category in MT_BENCH_CATEGORIES else category


#: category groups ``--specbench-prompts`` takes beside categories: each names the categories of its own
CATEGORY_GROUPS: dict[str, tuple[str, ...]] = {MT_BENCH_GROUP: MT_BENCH_CATEGORIES}


def _categories_in_order(prompts: Sequence[Prompt]) -> list[str]:
    return list(dict.fromkeys(p.category for p in prompts))


def _groups_held(available: Sequence[str]) -> dict[str, list[str]]:
    """Each group of which the file holds a category: the categories it holds, in file order."""
    held = {group: [c for c in available if c in members] for group, members in CATEGORY_GROUPS.items()}
    return {group: categories for group, categories in held.items() if categories}


def _ambiguous(name: str, members: Sequence[str]) -> ValueError:
    """A name that is a category of the file and a group it holds: either reading would run other prompts."""
    return ValueError(
        f"{name!r} is both a category of the prompt file and the category group {name} (the file's "
        f"{', '.join(members)}); to run the group, name its categories ({','.join(members)}); to run the category, "
        "rename it in the file: a category may not share the name of a group whose categories the file holds"
    )


def _wanted(names: Sequence[str], available: list[str]) -> set[str]:
    """The categories ``names`` selects; a name that is both a category and a group is refused as ambiguous."""
    groups = _groups_held(available)
    wanted: set[str] = set()
    unknown: list[str] = []
    for name in dict.fromkeys(names):
        if name in available and name in groups:
            raise _ambiguous(name, groups[name])
        if name in available:
            wanted.add(name)
        elif name in groups:
            wanted.update(groups[name])
        else:
            unknown.append(name)
    if unknown:
        listed = f"available: {', '.join(available)}"
        if groups:
            listed += "; groups: " + "; ".join(f"{g} ({', '.join(cats)})" for g, cats in groups.items())
        raise ValueError(
            f"unknown prompt categor{'y' if len(unknown) == 1 else 'ies'} {', '.join(map(repr, unknown))}; {listed}"
        )
    return wanted


def _kept_positions(size: int, per_category: int | None, seed: int | None, category: str) -> range | set[int]:
    """Which positions (0-based, within its category) of a category of ``size`` prompts run."""
    if per_category is None or per_category >= size:
        return range(size)
    if seed is None:
        return range(per_category)
    # A generator of its own per category (string seeds hash stably across Python versions), so a category's
    # sample does not depend on which other categories run; a whole permutation cut at N, so the sample of N is
    # part of the sample of N + 1.
    order = random.Random(f"specbench-prompts:{seed}:{category}").sample(range(size), size)
    return set(order[:per_category])


def select_prompts(
    prompts: Sequence[Prompt],
    categories: Sequence[str] | None,
    per_category: int | None = None,
    seed: int | None = None,
) -> list[Prompt]:
    """Keep the prompts of ``categories`` (None: all), in the order of ``prompts``.

    ``categories`` may name category groups (``mt_bench``: the MT-bench categories ``prompts`` holds).
    ``per_category`` keeps N prompts of each category: the first N, or with ``seed`` a sample drawn with it,
    kept in file order; a category of N or fewer runs whole. An unknown category raises ValueError listing the
    categories ``prompts`` has (a user file may define its own) and the groups it holds; so does a name that is
    both a category of ``prompts`` and a group it holds (``mt_bench``), naming both.
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
        wanted = _wanted(categories, available)

    sizes = Counter(p.category for p in prompts)
    kept_positions = {c: _kept_positions(sizes[c], per_category, seed, c) for c in wanted}
    kept: list[Prompt] = []
    position: dict[str, int] = {}
    for prompt in prompts:
        if prompt.category not in wanted:
            continue
        index = position[prompt.category] = position.get(prompt.category, -1) + 1
        if index in kept_positions[prompt.category]:
            kept.append(prompt)
    return kept


def _span(counts: Sequence[int]) -> str:
    return f"{min(counts)}" if min(counts) == max(counts) else f"{min(counts)} to {max(counts)}"


def _ids(prompts: Sequence[Prompt], most: int = 8) -> str:
    """The prompts' ids, the middle left out of a long list."""
    ids = [p.id for p in prompts]
    if len(ids) <= most:
        return ", ".join(ids)
    return f"{', '.join(ids[: most - 2])}, ..., {ids[-1]} ({len(ids)} ids)"


def sample_line(
    prompts: Sequence[Prompt],
    selected: Sequence[Prompt],
    per_category: int | None,
    seed: int | None,
    source: str,
) -> str:
    """One line saying which prompts of ``source`` run: every prompt of their categories, or N per category, the
    first N or (``seed``) a sample drawn with it, with the ids. ``selected`` is what :func:`select_prompts`
    returned for these arguments; the line names the options that choose otherwise."""
    categories = _categories_in_order(selected)
    sizes = Counter(p.category for p in prompts)
    kept = Counter(p.category for p in selected)
    line = f"prompts: {len(selected)} of the {len(prompts)} in {source}"
    if categories != _categories_in_order(prompts):
        line += f", from {len(categories)} of its {len(sizes)} categories"
    elif len(selected) == len(prompts):
        return f"prompts: all {len(prompts)} in {source}"
    if all(kept[c] == sizes[c] for c in categories):
        return line + ", every prompt of each"
    counts = f"{_span([kept[c] for c in categories])} of {_span([sizes[c] for c in categories])}"
    if seed is None:
        how = f"each category's first {counts} (--specbench-prompts-per-category=N draws a seeded sample)"
    else:
        how = f"{counts} per category, a sample drawn with seed {seed} (--specbench-seed)"
    return f"{line}: {how}; ids: {_ids(selected)}"


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
