"""Tests of the prompt suite and of pytest_specbench.cases.prompts."""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_specbench.cases.prompts import (
    CATEGORIES,
    DEFAULT_PROMPT_FILE,
    FILLER_SEPARATOR,
    Prompt,
    PromptFileError,
    case_label,
    filler_text,
    fit_context,
    load_prompts,
    select_prompts,
)

SHIPPED = load_prompts()


def by_category(category: str) -> list[Prompt]:
    return [p for p in SHIPPED if p.category == category]


def words(text: str) -> int:
    return len(text.split())


# --------------------------------------------------------------------------
# The shipped suite
# --------------------------------------------------------------------------


def test_default_file_is_package_data():
    package_dir = Path(__import__("pytest_specbench").__file__).resolve().parent
    assert DEFAULT_PROMPT_FILE == package_dir / "data" / "prompts.jsonl"
    assert DEFAULT_PROMPT_FILE.is_file()
    assert load_prompts(None) == load_prompts(DEFAULT_PROMPT_FILE) == load_prompts(str(DEFAULT_PROMPT_FILE))


def test_shipped_categories_in_order_with_at_least_four_each():
    assert len(CATEGORIES) == 12
    assert list(dict.fromkeys(p.category for p in SHIPPED)) == list(CATEGORIES)
    counts = Counter(p.category for p in SHIPPED)
    assert all(counts[c] >= 4 for c in CATEGORIES), counts
    # Grouped by category: every category is one contiguous block.
    blocks = [c for i, c in enumerate(p.category for p in SHIPPED) if i == 0 or SHIPPED[i - 1].category != c]
    assert blocks == list(CATEGORIES)


def test_shipped_ids_unique_explicit_and_numbered():
    ids = [p.id for p in SHIPPED]
    assert len(ids) == len(set(ids))
    for category in CATEGORIES:
        assert [p.id for p in by_category(category)] == [
            f"{category}-{n:02d}" for n in range(1, len(by_category(category)) + 1)
        ]


def test_every_shipped_line_is_a_complete_record():
    # The shipped file must not rely on the loader's leniency (derived ids,
    # ignored keys): every non-comment line has exactly id, category, text.
    lines = DEFAULT_PROMPT_FILE.read_text(encoding="utf-8").split("\n")
    records = [json.loads(line) for line in lines if line.strip() and not line.startswith("#")]
    assert len(records) == len(SHIPPED)
    for record, prompt in zip(records, SHIPPED):
        assert set(record) == {"id", "category", "text"}
        assert (record["id"], record["category"], record["text"]) == (prompt.id, prompt.category, prompt.text)


@pytest.mark.parametrize("category", CATEGORIES)
def test_shipped_lengths_vary_within_each_category(category):
    counts = sorted(words(p.text) for p in by_category(category))
    assert counts[0] <= 30, f"{category}: no short (one-sentence) prompt: {counts}"
    assert 150 <= counts[-1] <= 300, f"{category}: no long 150-300 word prompt: {counts}"
    assert len(set(counts)) >= 3, f"{category}: lengths too uniform: {counts}"


def test_shipped_texts_are_unfinished_without_trailing_whitespace():
    for p in SHIPPED:
        # Trailing spaces tokenise badly (the next word usually carries its
        # own leading space) and a final newline would end the text.
        assert p.text == p.text.rstrip(), p.id
        # Stopping at the end of a sentence or document invites an
        # end-of-text token instead of a continuation.
        assert not p.text.endswith((".", "!", "?", '."', "}", "]")), p.id


def test_code_python_prompts_stop_mid_code():
    for p in by_category("code_python"):
        with pytest.raises(SyntaxError):
            ast.parse(p.text)


def test_code_json_prompts_are_unfinished_json():
    for p in by_category("code_json"):
        assert p.text.lstrip()[0] in "{[", p.id
        with pytest.raises(json.JSONDecodeError):
            json.loads(p.text)


def test_dialogue_prompts_stop_at_a_speaker_tag():
    for p in by_category("dialogue"):
        last_line = p.text.split("\n")[-1]
        assert re.fullmatch(r"[A-Z][A-Za-z. ]{0,30}:", last_line), (p.id, last_line)
        # The tag's speaker has spoken before: the model continues a dialogue.
        assert p.text.count("\n" + last_line) + p.text.startswith(last_line) >= 1, p.id


def test_list_items_prompts_are_lists():
    marker = re.compile(r"^\s*(?:[-*]|\d+\.)\s", re.MULTILINE)
    for p in by_category("list_items"):
        assert len(marker.findall(p.text)) >= 3, p.id


def test_repetitive_prompts_repeat_phrases():
    for p in by_category("repetitive"):
        tokens = p.text.split()
        grams = Counter(tuple(tokens[i : i + 4]) for i in range(len(tokens) - 3))
        assert grams.most_common(1)[0][1] >= 3, p.id


def test_repetitive_pattern_prompts_are_not_repeated_prose():
    # Patterns are short tokens (numbers, cells, alternating words), not
    # repeated sentences: the average "word" is short.
    for p in by_category("repetitive_pattern"):
        tokens = p.text.split()
        assert sum(map(len, tokens)) / len(tokens) < 5, p.id


@pytest.mark.slow
def test_shipped_labels_work_in_pytest_k(pytester):
    labels = [p.id for p in SHIPPED] + list(CATEGORIES)
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.parametrize("label", {labels!r}, ids={labels!r})
        def test_case(label):
            pass
        """
    )
    # One -k naming every label must parse and select them all ...
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-k", " or ".join(labels))
    result.assert_outcomes(passed=len(labels))
    # ... and a hyphenated id selects exactly its own case.
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-k", "code_python-02")
    result.assert_outcomes(passed=1)


# --------------------------------------------------------------------------
# Loading: good files
# --------------------------------------------------------------------------


def write(tmp_path: Path, *lines: str, name: str = "prompts.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def rec(**fields: object) -> str:
    return json.dumps(fields, ensure_ascii=False)


def test_comments_blank_lines_and_unknown_keys(tmp_path):
    path = write(
        tmp_path,
        "# a comment",
        "",
        "   ",
        rec(id="a-x", category="alpha", text="one", note="ignored"),
        "  # indented comment",
        rec(category="beta", text="two"),
    )
    assert load_prompts(path) == [Prompt("a-x", "alpha", "one"), Prompt("beta-01", "beta", "two")]


def test_derived_ids_count_within_category_in_file_order(tmp_path):
    path = write(
        tmp_path,
        rec(category="a", text="1"),
        rec(category="b", text="2"),
        rec(id="named", category="a", text="3"),
        rec(category="a", text="4"),
        rec(category="b", text="5"),
    )
    assert [p.id for p in load_prompts(path)] == ["a-01", "b-01", "named", "a-03", "b-02"]


def test_text_is_kept_verbatim(tmp_path):
    text = "  leading spaces, a tab\t, a line break\n and U+2028 \u2028 inside  "
    path = write(tmp_path, rec(category="c", text=text))
    [prompt] = load_prompts(path)
    assert prompt.text == text


def test_crlf_and_bom_are_accepted(tmp_path):
    path = tmp_path / "win.jsonl"
    body = "\r\n".join([rec(category="c", text="x"), rec(category="c", text="y")]) + "\r\n"
    path.write_bytes(b"\xef\xbb\xbf" + body.encode("utf-8"))
    assert [p.text for p in load_prompts(path)] == ["x", "y"]


# --------------------------------------------------------------------------
# Loading: malformed files
# --------------------------------------------------------------------------

# Its id is the one the second prompt of category "ok" would derive.
GOOD = rec(id="ok-02", category="ok", text="fine")

MALFORMED = {
    "invalid_json": ('{"category": "c", "text": "unterminated}', "invalid JSON"),
    "trailing_comma": ('{"category": "c", "text": "x",}', "invalid JSON"),
    "array": ('["c", "text"]', "expected a JSON object, got list"),
    "string": ('"just a string"', "expected a JSON object, got str"),
    "number": ("42", "expected a JSON object, got int"),
    "missing_text": (rec(category="c"), 'missing "text"'),
    "empty_text": (rec(category="c", text=""), '"text" is empty'),
    "blank_text": (rec(category="c", text=" \n\t "), '"text" is empty'),
    "missing_category": (rec(text="hello"), 'missing "category"'),
    "text_not_string": (rec(category="c", text=["a"]), '"text" must be a string, got list'),
    "category_not_string": (rec(category=3, text="x"), '"category" must be a string, got int'),
    "id_not_string": (rec(id=7, category="c", text="x"), '"id" must be a string, got int'),
    "id_null": (rec(id=None, category="c", text="x"), '"id" must be a string, got NoneType'),
    "id_with_space": (rec(id="my id", category="c", text="x"), 'bad "id"'),
    "id_leading_hyphen": (rec(id="-x", category="c", text="x"), 'bad "id"'),
    "category_with_dot": (rec(category="code.py", text="x"), 'bad "category"'),
    "category_k_keyword": (rec(category="not", text="x"), 'bad "category"'),
    "empty_category": (rec(category="", text="x"), 'bad "category"'),
    "duplicate_id": (rec(id="ok-02", category="c", text="x"), "duplicate id 'ok-02' (first used on line 3)"),
    "derived_id_collides": (rec(category="ok", text="x"), "duplicate id 'ok-02' (first used on line 3)"),
    "duplicate_key": ('{"category": "c", "text": "a", "text": "b"}', "duplicate key 'text'"),
}


@pytest.mark.parametrize("bad_line, fragment", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_line_names_file_and_line(tmp_path, bad_line, fragment):
    # Comment, blank line, good record, then the bad one: physical line 5.
    path = write(tmp_path, "# header", "", GOOD, "", bad_line, GOOD.replace("ok-02", "ok-99"), name="my_suite.jsonl")
    with pytest.raises(PromptFileError) as info:
        load_prompts(path)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.path == path and err.line == 5
    message = str(err)
    assert message.startswith(f"{path}:5: "), message
    assert fragment in message
    assert "one JSON object" in message or "unique" in message  # says what is accepted


def test_first_line_error_is_line_1(tmp_path):
    path = write(tmp_path, "not json at all")
    with pytest.raises(PromptFileError, match=r"prompts\.jsonl:1: invalid JSON"):
        load_prompts(path)


def test_a_raw_control_character_is_named_with_its_column_and_how_to_write_it(tmp_path):
    # Before: "invalid JSON (Invalid control character at at column 28)".
    path = tmp_path / "nul.jsonl"
    path.write_bytes(b'{"category": "c", "text": "a\x00b"}\n')
    with pytest.raises(PromptFileError) as info:
        load_prompts(path)
    assert str(info.value) == (
        f"{path}:1: invalid JSON (a raw control character, U+0000, at column 29); JSON strings hold control "
        'characters escaped ("\\u0000"); write it so, or leave it out'
    )


def test_invalid_utf8_names_the_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes((GOOD + "\n").encode() + '{"category": "c", "text": "caf\xe9"}\n'.encode("latin-1"))
    with pytest.raises(PromptFileError, match=r"latin1\.jsonl:2: invalid UTF-8") as info:
        load_prompts(path)
    assert info.value.line == 2


def test_lone_surrogate_names_the_line_before_any_tokenizer(tmp_path):
    # JSON lets "\ud800" through as a string no tokenizer can encode; every case would then fail.
    path = write(tmp_path, GOOD, '{"category": "c", "text": "abc \\ud800 def"}')
    with pytest.raises(
        PromptFileError,
        match=r"prompts\.jsonl:2: \"text\" holds the lone surrogate \\ud800 "
        r"at character 5; prompt text must be valid Unicode",
    ) as info:
        load_prompts(path)
    assert info.value.line == 2
    # A full pair is one valid character.
    pair = write(tmp_path, '{"category": "c", "text": "smile \\ud83d\\ude00"}')
    assert load_prompts(pair)[0].text == "smile \U0001f600"


@pytest.mark.parametrize("content", ["", "\n\n", "# only a comment\n\n   \n"], ids=["empty", "blank", "comments"])
def test_file_without_prompts_is_an_error(tmp_path, content):
    path = tmp_path / "nothing.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(PromptFileError, match="no prompts") as info:
        load_prompts(path)
    assert info.value.line is None
    assert str(info.value).startswith(f"{path}: ")


def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "nowhere" / "missing.jsonl"
    with pytest.raises(PromptFileError, match="not found") as info:
        load_prompts(path)
    assert str(path) in str(info.value)


def test_directory_is_an_error(tmp_path):
    with pytest.raises(PromptFileError, match="not a regular file"):
        load_prompts(tmp_path)


def test_prompt_constructor_validates():
    with pytest.raises(ValueError):
        Prompt("bad id", "c", "x")
    with pytest.raises(ValueError):
        Prompt("ok", "c", "   ")
    with pytest.raises(TypeError):
        Prompt("ok", "c", 5)  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# Selection
# --------------------------------------------------------------------------

USER = [
    Prompt("x1", "zeta", "a"),
    Prompt("y1", "alpha", "b"),
    Prompt("x2", "zeta", "c"),
    Prompt("y2", "alpha", "d"),
    Prompt("z1", "mine", "e"),
    Prompt("x3", "zeta", "f"),
]


def test_select_all_by_default():
    selected = select_prompts(USER, None)
    assert selected == USER and selected is not USER


def test_select_keeps_file_order_not_argument_order():
    assert [p.id for p in select_prompts(USER, ["mine", "zeta"])] == ["x1", "x2", "z1", "x3"]


def test_select_per_category_keeps_first_n():
    assert [p.id for p in select_prompts(USER, None, per_category=1)] == ["x1", "y1", "z1"]
    assert [p.id for p in select_prompts(USER, ["zeta"], per_category=2)] == ["x1", "x2"]
    assert select_prompts(USER, None, per_category=100) == USER


def test_select_shipped_one_per_category():
    selected = select_prompts(SHIPPED, None, per_category=1)
    assert [p.id for p in selected] == [f"{c}-01" for c in CATEGORIES]
    assert [case_label(p, True) for p in selected] == list(CATEGORIES)


def test_select_unknown_category_lists_the_files_categories():
    with pytest.raises(ValueError) as info:
        select_prompts(USER, ["zeta", "natural", "nope"])
    message = str(info.value)
    assert "'natural'" in message and "'nope'" in message and "'zeta'" not in message
    assert "available: zeta, alpha, mine" in message


@pytest.mark.parametrize("n", [0, -1])
def test_select_rejects_non_positive_per_category(n):
    with pytest.raises(ValueError, match="per_category"):
        select_prompts(USER, None, per_category=n)


def test_select_rejects_bare_string_and_empty_list():
    with pytest.raises(TypeError, match="string 'zeta'"):
        select_prompts(USER, "zeta")
    with pytest.raises(ValueError, match="no categories"):
        select_prompts(USER, [])


def test_case_label():
    p = Prompt("code_python-02", "code_python", "def f(")
    assert case_label(p, single_per_category=True) == "code_python"
    assert case_label(p, single_per_category=False) == "code_python-02"


# --------------------------------------------------------------------------
# Filler and context fitting
# --------------------------------------------------------------------------


def test_filler_text_excludes_the_prompt_and_keeps_order():
    filler = filler_text(USER, exclude_id="x2")
    assert filler == FILLER_SEPARATOR.join(["a", "b", "d", "e", "f"]) + FILLER_SEPARATOR
    assert filler_text(USER, "x2") == filler  # deterministic
    assert filler_text([USER[0]], exclude_id="x1") == ""


def test_filler_text_of_shipped_suite_is_long_enough_for_512_tokens():
    for p in select_prompts(SHIPPED, None, per_category=1):
        filler = filler_text(SHIPPED, p.id)
        assert p.text not in filler
        assert words(filler) > 1000  # far more than 512 tokens of padding


# Prompt ids in [0, 999], filler ids in [1000, 1999]: padding is traceable.
prompt_ids_st = st.lists(st.integers(0, 999), max_size=60)
filler_ids_st = st.lists(st.integers(1000, 1999), min_size=1, max_size=20)


@given(prompt_ids_st, st.integers(1, 120), filler_ids_st)
def test_fit_context_properties(prompt_ids, context_tokens, filler_ids):
    out = fit_context(prompt_ids, context_tokens, filler_ids)
    assert len(out) == context_tokens
    kept = min(len(prompt_ids), context_tokens)
    # The end of the prompt is kept unchanged at the end of the context.
    assert out[context_tokens - kept :] == prompt_ids[len(prompt_ids) - kept :]
    padding = out[: context_tokens - kept]
    # Padding comes only from the filler, as a window of its repetition that
    # ends where the filler ends (the filler's last id touches the prompt).
    assert all(t >= 1000 for t in padding)
    if padding:
        stream = filler_ids * (len(padding) // len(filler_ids) + 1)
        assert padding == stream[len(stream) - len(padding) :]
        assert padding[-1] == filler_ids[-1]


@given(prompt_ids_st, st.integers(1, 120))
def test_fit_context_long_prompt_needs_no_filler(prompt_ids, context_tokens):
    if len(prompt_ids) >= context_tokens:
        assert fit_context(prompt_ids, context_tokens, []) == prompt_ids[-context_tokens:]
    else:
        with pytest.raises(ValueError, match="filler_ids is empty"):
            fit_context(prompt_ids, context_tokens, [])


def test_fit_context_examples():
    assert fit_context([1, 2, 3], 8, [7, 8, 9]) == [8, 9, 7, 8, 9, 1, 2, 3]
    assert fit_context([1, 2, 3, 4, 5], 2, [9]) == [4, 5]
    assert fit_context([1, 2], 2, []) == [1, 2]
    assert fit_context([], 3, [5, 6]) == [6, 5, 6]


@pytest.mark.parametrize("context_tokens", [0, -5])
def test_fit_context_rejects_non_positive_length(context_tokens):
    with pytest.raises(ValueError, match="context_tokens"):
        fit_context([1, 2, 3], context_tokens, [4])


def test_fit_context_does_not_alias_inputs():
    prompt, filler = [1, 2], [3]
    out = fit_context(prompt, 2, filler)
    out.append(99)
    assert prompt == [1, 2]
    out = fit_context(prompt, 4, filler)
    assert out == [3, 3, 1, 2] and filler == [3]
