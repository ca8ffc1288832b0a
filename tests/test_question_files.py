"""Spec-Bench's and MT-bench's question files: read as they are, selected by category or group, sampled per
category with the run's seed, and the sample stated. Every file here is written by the test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_specbench.cases.prompts import (
    MT_BENCH_CATEGORIES,
    MT_BENCH_GROUP,
    Prompt,
    PromptFileError,
    load_prompts,
    sample_line,
    select_prompts,
)
from pytest_specbench.plugin.session_inputs import prompt_sample_line, sample_seed, selected_prompts
from pytest_specbench.settings.config import ConfigError, parse_settings


def write(tmp_path: Path, *lines: str, name: str = "question.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def question(question_id: object, category: str, *turns: object, **other: object) -> str:
    return json.dumps({"question_id": question_id, "category": category, "turns": list(turns), **other})


def questions(categories: dict[str, int], first_id: int = 1) -> list[str]:
    """``n`` one-turn questions per category, numbered on through the file as Spec-Bench's are."""
    lines, next_id = [], first_id
    for category, n in categories.items():
        for _ in range(n):
            lines.append(question(next_id, category, f"Question {next_id} about {category}?"))
            next_id += 1
    return lines


# --- reading ------------------------------------------------------------------------------------------


def test_a_two_turn_question_is_a_conversation_and_reference_is_ignored(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        question(81, "writing", "Write a travel blog post.", "Rewrite it, every sentence starting with A."),
        question(111, "math", "What is 3 + 4?", "And times 2?", reference=["7", "14"]),
    )
    first, second = load_prompts(path)
    assert first == Prompt(
        "writing-81",
        "writing",
        "Write a travel blog post.",
        later_turns=("Rewrite it, every sentence starting with A.",),
        conversation=True,
    )
    assert second.id == "math-111" and second.turns == ("What is 3 + 4?", "And times 2?")


def test_a_one_turn_question_and_a_string_id(tmp_path: Path) -> None:
    path = write(tmp_path, question("q_7", "translation", "Translate German to English: Guten Tag"))
    [prompt] = load_prompts(path)
    assert (prompt.id, prompt.text, prompt.later_turns, prompt.conversation) == (
        "translation-q_7",
        "Translate German to English: Guten Tag",
        (),
        True,
    )


def test_both_formats_in_one_file_keep_file_order(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        json.dumps({"category": "natural", "text": "Once upon a time"}),
        question(1, "natural", "Tell me a story."),
        json.dumps({"category": "natural", "text": "The sea was"}),
    )
    prompts = load_prompts(path)
    assert [(p.id, p.conversation) for p in prompts] == [
        ("natural-01", False),
        ("natural-1", True),
        ("natural-03", False),  # a derived id counts every prompt of its category before it
    ]


GOOD = question(1, "ok", "fine")

MALFORMED = {
    "missing_question_id": (json.dumps({"category": "c", "turns": ["x"]}), 'missing "question_id"'),
    "bool_question_id": (question(True, "c", "x"), '"question_id" must be an integer or a string, got bool'),
    "float_question_id": (question(1.5, "c", "x"), '"question_id" must be an integer or a string, got float'),
    "null_question_id": (question(None, "c", "x"), '"question_id" must be an integer or a string, got NoneType'),
    "negative_question_id": (question(-3, "c", "x"), 'bad "question_id": -3'),
    "question_id_with_space": (question("a b", "c", "x"), "bad \"question_id\": 'a b'"),
    "turns_not_a_list": (json.dumps({"question_id": 2, "category": "c", "turns": "x"}), '"turns" must be a list'),
    "turns_empty": (question(2, "c"), '"turns" is empty'),
    "turn_not_a_string": (question(2, "c", "x", 5), '"turns[1]" (turn 2) must be a string, got int'),
    "turn_empty": (question(2, "c", "x", "y", " \n"), '"turns[2]" (turn 3) is empty'),
    "turn_lone_surrogate": (
        question(2, "c", "x", "abc \ud800"),
        '"turns[1]" (turn 2) holds the lone surrogate \\ud800',
    ),
    "duplicate_question_id": (
        question(1, "ok", "again"),
        "duplicate \"question_id\": the id 'ok-1' it gives was first",
    ),
    "missing_category": (json.dumps({"question_id": 2, "turns": ["x"]}), 'missing "category"'),
    "category_not_a_string": (question(2, 3, "x"), '"category" must be a string, got int'),  # type: ignore[arg-type]
    "bad_category": (question(2, "a.b", "x"), 'bad "category"'),
    "text_and_turns": (
        json.dumps({"question_id": 2, "category": "c", "turns": ["x"], "text": "x"}),
        'both "text" and "turns"',
    ),
    "neither_text_nor_turns": (json.dumps({"question_id": 2, "category": "c"}), 'missing "text" (a prompt) or "turns"'),
}


@pytest.mark.parametrize(("bad_line", "fragment"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_question_names_file_line_and_field(tmp_path: Path, bad_line: str, fragment: str) -> None:
    # A comment, a good question, a blank line, then the bad one: physical line 4.
    path = write(tmp_path, "# questions", GOOD, "", bad_line, question(99, "ok", "after"))
    with pytest.raises(PromptFileError) as info:
        load_prompts(path)
    message = str(info.value)
    assert info.value.path == path and info.value.line == 4
    assert message.startswith(f"{path}:4: "), message
    assert fragment in message, message


@pytest.mark.parametrize(
    "line",
    [
        json.dumps({"question_id": 2, "category": "c"}),
        json.dumps({"question_id": 2, "category": "c", "turns": ["x"], "text": "x"}),
    ],
    ids=["neither", "both"],
)
def test_a_line_of_neither_or_both_formats_names_both(tmp_path: Path, line: str) -> None:
    with pytest.raises(PromptFileError) as info:
        load_prompts(write(tmp_path, line))
    message = str(info.value)
    assert '"text": "..."' in message and '"turns": ["...", "..."]' in message, message


def test_the_format_is_told_by_fields_not_by_the_file_name(tmp_path: Path) -> None:
    # A question file named like a prompt file, and a prompt file named like a question file.
    as_prompts = write(tmp_path, question(1, "qa", "Who?"), name="prompts.jsonl")
    as_questions = write(tmp_path, json.dumps({"category": "qa", "text": "Who"}), name="question.jsonl")
    assert load_prompts(as_prompts)[0].conversation
    assert not load_prompts(as_questions)[0].conversation


# --- selecting categories and groups --------------------------------------------------------------


SPEC_BENCH_LIKE = {"writing": 2, "math": 2, "translation": 2, "rag": 2}


def test_the_mt_bench_group_selects_the_mt_bench_categories_the_file_holds(tmp_path: Path) -> None:
    prompts = load_prompts(write(tmp_path, *questions(SPEC_BENCH_LIKE)))
    selected = select_prompts(prompts, [MT_BENCH_GROUP])
    assert {p.category for p in selected} == {"writing", "math"}
    assert {"writing", "math"} <= set(MT_BENCH_CATEGORIES)
    # A group beside a category, in file order, each prompt once.
    both = select_prompts(prompts, ["rag", MT_BENCH_GROUP, "math"])
    assert [p.id for p in both] == ["writing-1", "writing-2", "math-3", "math-4", "rag-7", "rag-8"]


def test_an_unknown_name_lists_the_categories_and_the_group(tmp_path: Path) -> None:
    prompts = load_prompts(write(tmp_path, *questions(SPEC_BENCH_LIKE)))
    with pytest.raises(ValueError) as info:
        select_prompts(prompts, ["nope"])
    message = str(info.value)
    assert "unknown prompt category 'nope'" in message
    assert "available: writing, math, translation, rag; groups: mt_bench (writing, math)" in message


def test_the_group_is_unknown_where_the_file_holds_none_of_its_categories(tmp_path: Path) -> None:
    prompts = load_prompts(write(tmp_path, *questions({"translation": 1, "rag": 1})))
    with pytest.raises(ValueError, match=r"unknown prompt category 'mt_bench'; available: translation, rag$"):
        select_prompts(prompts, [MT_BENCH_GROUP])


def test_a_category_named_as_a_group_is_refused_as_ambiguous_before_any_model_loads(bench, tmp_path: Path) -> None:
    path = write(tmp_path, *questions({"writing": 1, "math": 1, MT_BENCH_GROUP: 1}))
    result = bench(f"--specbench-prompt-file={path}", prompts=MT_BENCH_GROUP)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*'mt_bench' is both a category of the prompt file and the category group mt_bench (the file's "
            "writing, math); to run the group, name its categories (writing,math); to run the category, rename "
            "it in the file*"
        ]
    )
    assert "collected" not in result.stdout.str()  # stopped at configure: no case collected, no model loaded


# --- the sample -----------------------------------------------------------------------------------


TWENTY_EACH = {"writing": 20, "qa": 20, "rag": 20}


@pytest.fixture
def twenty_each(tmp_path: Path) -> list[Prompt]:
    return load_prompts(write(tmp_path, *questions(TWENTY_EACH)))


def test_the_same_seed_draws_the_same_sample_and_another_seed_another(twenty_each: list[Prompt]) -> None:
    ids = [p.id for p in select_prompts(twenty_each, None, per_category=3, seed=0)]
    assert ids == [p.id for p in select_prompts(twenty_each, None, per_category=3, seed=0)]
    assert ids != [p.id for p in select_prompts(twenty_each, None, per_category=3, seed=1)]
    # A sample, not the first three of each category.
    assert ids != [p.id for p in select_prompts(twenty_each, None, per_category=3)]


def test_the_sample_keeps_file_order_and_n_per_category(twenty_each: list[Prompt]) -> None:
    sample = select_prompts(twenty_each, None, per_category=4, seed=7)
    positions = [twenty_each.index(p) for p in sample]
    assert positions == sorted(positions)
    assert [p.category for p in sample] == ["writing"] * 4 + ["qa"] * 4 + ["rag"] * 4


def test_a_categorys_sample_does_not_depend_on_the_others_or_on_n(twenty_each: list[Prompt]) -> None:
    alone = select_prompts(twenty_each, ["qa"], per_category=3, seed=5)
    among_all = [p for p in select_prompts(twenty_each, None, per_category=3, seed=5) if p.category == "qa"]
    assert alone == among_all
    # The sample of 3 is part of the sample of 4: raising N adds prompts, it does not redraw.
    assert set(alone) < set(select_prompts(twenty_each, ["qa"], per_category=4, seed=5))


@pytest.mark.parametrize("n", [20, 21, 100])
def test_n_at_or_above_a_categorys_size_keeps_it_whole(twenty_each: list[Prompt], n: int) -> None:
    assert select_prompts(twenty_each, None, per_category=n, seed=3) == twenty_each


def test_a_small_category_runs_whole_beside_sampled_ones(tmp_path: Path) -> None:
    prompts = load_prompts(write(tmp_path, *questions({"writing": 2, "qa": 20})))
    sample = select_prompts(prompts, None, per_category=3, seed=0)
    assert [p.category for p in sample] == ["writing"] * 2 + ["qa"] * 3


# --- the options: the GPU default, the seed, the stated sample ----------------------------------------


def config(settings: dict[str, str], gpu: bool = False):
    values = {name: (raw, f"--specbench-{name}") for name, raw in {"dtype": "float32", **settings}.items()}
    return parse_settings(values, cuda_available=lambda: gpu)


def test_the_default_is_one_per_category_on_cpu_and_every_prompt_on_a_gpu(tmp_path: Path) -> None:
    path = write(tmp_path, *questions(TWENTY_EACH))
    prompts = load_prompts(path)
    cpu, gpu = config({"prompt-file": str(path)}), config({"prompt-file": str(path)}, gpu=True)
    assert (cpu.prompts_per_category, gpu.prompts_per_category) == (1, None)
    # The CPU default runs each category's first prompt, as before; a GPU runs the whole file.
    assert [p.id for p in selected_prompts(cpu, prompts)] == ["writing-1", "qa-21", "rag-41"]
    assert selected_prompts(gpu, prompts) == prompts
    assert sample_seed(cpu) is None
    # "all" asks for the whole file on a CPU too.
    assert selected_prompts(config({"prompt-file": str(path), "prompts-per-category": "all"}), prompts) == prompts


def test_a_given_n_is_a_sample_drawn_with_the_runs_seed(tmp_path: Path) -> None:
    path = write(tmp_path, *questions(TWENTY_EACH))
    prompts = load_prompts(path)
    given = {"prompt-file": str(path), "prompts-per-category": "3"}
    seed_0, seed_9 = config(given), config({**given, "seed": "9"})
    assert sample_seed(seed_0) == 0 and sample_seed(seed_9) == 9
    assert selected_prompts(seed_0, prompts) == select_prompts(prompts, None, 3, seed=0)
    assert selected_prompts(seed_9, prompts) == select_prompts(prompts, None, 3, seed=9)


@pytest.mark.parametrize(("raw", "message"), [("0", "0 is too small"), ("some", "'some' is not a whole number")])
def test_a_bad_count_names_what_is_accepted(raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"{message}; accepted: an integer >= 1, or all"):
        config({"prompts-per-category": raw})


def test_the_sample_is_stated_with_its_seed_and_ids(tmp_path: Path) -> None:
    path = write(tmp_path, *questions(TWENTY_EACH))
    prompts = load_prompts(path)
    settings = config({"prompt-file": str(path), "prompts-per-category": "3", "prompts": "qa,rag"})
    selected = selected_prompts(settings, prompts)
    line = prompt_sample_line(settings, prompts, selected)
    assert line.startswith(
        f"prompts: 6 of the 60 in {path}, from 2 of its 3 categories: 3 of 20 per category, a sample drawn with "
        "seed 0 (--specbench-seed); ids: "
    ), line
    assert line.endswith(", ".join(p.id for p in selected))


def test_a_long_id_list_is_abbreviated_and_the_whole_file_said_so(twenty_each: list[Prompt]) -> None:
    selected = select_prompts(twenty_each, None, per_category=5, seed=0)
    line = sample_line(twenty_each, selected, 5, 0, "question.jsonl")
    assert line.startswith("prompts: 15 of the 60 in question.jsonl: 5 of 20 per category, a sample drawn with seed 0")
    assert line.endswith(f", ..., {selected[-1].id} (15 ids)")
    assert sample_line(twenty_each, twenty_each, None, None, "question.jsonl") == "prompts: all 60 in question.jsonl"
    first = select_prompts(twenty_each, None, per_category=1)
    assert "each category's first 1 of 20 (--specbench-prompts-per-category=N draws a seeded sample)" in (
        sample_line(twenty_each, first, 1, None, "question.jsonl")
    )


# --- through the plugin: a usage error before any model loads ------------------------------------------


@pytest.mark.parametrize(
    ("lines", "prompts", "expected"),
    [
        (
            [GOOD, question(2, "ok", "x", "")],
            "ok",
            'question.jsonl:2: "turns[1]" (turn 2) is empty; a question line must be one JSON object',
        ),
        (
            questions({"writing": 1, "rag": 1}),
            "natural",
            "unknown prompt category 'natural'; available: writing, rag; groups: mt_bench (writing)",
        ),
    ],
    ids=["malformed", "unknown_category"],
)
def test_a_question_file_error_stops_pytest_before_any_model_loads(
    bench, tmp_path: Path, lines: list[str], prompts: str, expected: str
) -> None:
    path = write(tmp_path, *lines)
    result = bench(f"--specbench-prompt-file={path}", prompts=prompts)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "pytest-specbench: " in result.stderr.str() and expected in result.stderr.str()
    assert "collected" not in result.stdout.str()  # stopped at configure: no case collected, no model loaded
    assert "Traceback" not in result.stderr.str()
