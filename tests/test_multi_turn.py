"""Multi-turn prompts: each turn decoded from the turns before it and the target's own answers, timed and judged
lossless on its own; the case's figures sum the turns, and its row keeps each turn's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from factory import torch_threads, write_tiny_pair

from pytest_specbench.cases.conversation import PLAIN_JOIN, answer_text, conversation_text
from pytest_specbench.cases.matrix import build_matrix
from pytest_specbench.cases.prompts import Prompt
from pytest_specbench.measure import inputs, turns
from pytest_specbench.measure.pairing import MULTI_TURN_RUNS
from pytest_specbench.measure.row import build_result
from pytest_specbench.settings.config import parse_settings

QUESTION = Prompt(
    "writing-81",
    "writing",
    "Write a short note about the sea.",
    later_turns=("Now say it again in fewer words.",),
    conversation=True,
)
#: a chat template of the shape instruct models carry: a role line, the content, an end marker
TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


class _Plain:
    chat_template = None


class _Templated:
    chat_template = TEMPLATE

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        from jinja2 import Template

        return Template(TEMPLATE).render(messages=messages, add_generation_prompt=add_generation_prompt)


# --- the conversation's text before each turn ---------------------------------------------------------------------


def test_the_plain_join_puts_each_answer_after_its_turn_and_ends_for_the_next_answer():
    user, assistant = PLAIN_JOIN
    assert conversation_text(_Plain(), ["first?", "second?"], []) == f"{user}first?{assistant}"
    text = conversation_text(_Plain(), ["first?", "second?"], ["one"])
    assert text == f"{user}first?{assistant} one\n{user}second?{assistant}"
    assert text.index("first?") < text.index("one") < text.index("second?")


def test_a_chat_template_carries_the_turns_and_answers_in_roles():
    text = conversation_text(_Templated(), ["first?", "second?"], ["one"])
    assert text == "<user>first?</user><assistant>one</assistant><user>second?</user><assistant>"


def test_every_turn_but_the_last_needs_its_answer():
    with pytest.raises(ValueError, match="2 answers for 2 turns"):
        conversation_text(_Plain(), ["a", "b"], ["x", "y"])


# --- a two-turn case decoded, timed and judged --------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_turns(tmp_path_factory):
    from pytest_specbench.cases.pairs import load_pairs_file
    from pytest_specbench.measure.shared import SharedMeasurements
    from pytest_specbench.measure.store import ModelStore

    pairs_file = write_tiny_pair(tmp_path_factory.mktemp("turns_pair"))
    pairs_file.write_text(pairs_file.read_text() + '\n[pairs.lookup]\ntarget = "./target"\ndrafter = "prompt_lookup"\n')
    with torch_threads(1):
        yield load_pairs_file(pairs_file), ModelStore("cpu", "float32"), SharedMeasurements()


def _settings(**options: str):
    values = {
        "max_new_tokens": "10",
        "warmup": "0",
        "min_rounds": "2",
        "max_rounds": "2",
        "dtype": "float32",
        **options,
    }
    return parse_settings({name.replace("_", "-"): (value, f"--specbench-{name}") for name, value in values.items()})


def _measured(tiny_turns, pair: str = "tiny", prompt: Prompt = QUESTION, **options: str):
    from pytest_specbench.measure.case_run import MeasureContext
    from pytest_specbench.measure.runner import case_run_for, measure_block

    pairs, store, shared = tiny_turns
    config = _settings(**options)
    cases = build_matrix([pairs[pair]], (1, 4), [prompt], config.engines, (1,))
    context = MeasureContext(store, shared, config, [prompt])
    run = case_run_for(cases[0], context)  # prepared as it is made
    return cases, measure_block(cases, context), run, config


def _target_generate(model, ids: list[int], n: int) -> list[int]:
    """The target's own greedy answer, through model.generate with an explicit attention mask."""
    input_ids = torch.tensor([ids])
    with torch.inference_mode():
        out = model.generate(
            input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=n, do_sample=False, min_length=0
        )
    return out[0, len(ids) :].tolist()


def _check_turn_inputs(run: turns.TurnsRun, n: int, prompt: Prompt = QUESTION) -> None:
    """Turn 2 reads turn 1, the target's generate() answer to it, then turn 2, in the plain join: built here from
    the tokenizer and generate() alone, independently of the code under test."""
    target = run.target
    tokenizer, model = target.tokenizer, target.model
    user, assistant = PLAIN_JOIN
    first = tokenizer(f"{user}{prompt.text}{assistant}").input_ids
    assert run.turns[0].input_ids[0].tolist() == first
    answer = tokenizer.decode(_target_generate(model, first, n), skip_special_tokens=True).strip()
    second = tokenizer(f"{user}{prompt.text}{assistant} {answer}\n{user}{prompt.later_turns[0]}{assistant}")
    assert run.turns[1].input_ids[0].tolist() == second.input_ids


def test_each_turn_reads_the_turns_before_it_and_the_targets_answers(tiny_turns):
    _, _, run, config = _measured(tiny_turns)
    assert len(run.turns) == 2
    _check_turn_inputs(run, config.max_new_tokens)


def test_a_turn_out_of_order_is_caught(tiny_turns, monkeypatch):
    def swapped(tokenizer, turns_, answers):
        return conversation_text(tokenizer, list(reversed(turns_)), answers)

    monkeypatch.setattr(inputs, "conversation_text", swapped)
    prompt = Prompt("writing-82", "writing", "Name a colour.", ("Name another.",), True)
    _, _, run, config = _measured(tiny_turns, prompt=prompt)
    with pytest.raises(AssertionError):
        _check_turn_inputs(run, config.max_new_tokens, prompt)


def test_an_answer_not_fed_back_is_caught(tiny_turns, monkeypatch):
    monkeypatch.setattr(turns, "answer_text", lambda tokenizer, tokens: "")
    prompt = Prompt("writing-83", "writing", QUESTION.text, QUESTION.later_turns, True)
    _, _, run, config = _measured(tiny_turns, prompt=prompt)
    with pytest.raises(AssertionError):
        _check_turn_inputs(run, config.max_new_tokens, prompt)


@pytest.mark.parametrize("pair", ["tiny", "lookup"])
def test_a_two_turn_case_is_lossless_turn_by_turn_and_sums_its_turns(tiny_turns, pair):
    cases, measured, run, config = _measured(tiny_turns, pair)
    for case in cases:
        measurement = measured[case.id]
        assert measurement.verdict["verdict"] == "lossless"
        assert [verdict["verdict"] for verdict in measurement.turn_verdicts] == ["lossless", "lossless"]
        last = measurement.speculative[-1]
        assert len(last.turns) == 2 and last.stats.prefill_steps == 2
        assert last.stats.new_tokens == sum(turn.stats.new_tokens for turn in last.turns) == 2 * config.max_new_tokens
        assert last.stats.decode_steps == sum(turn.stats.decode_steps for turn in last.turns)
        # each turn equals the target's own generate() on that turn's input
        for turn_run, turn in zip(run.turns, last.turns):
            ids = turn_run.input_ids[0].tolist()
            assert turn.token_ids == _target_generate(run.target.model, ids, config.max_new_tokens)
        row = build_result(case, measurement, "cpu", "float32", ci_target=0.05)
        assert row.lossless and row.new_tokens == 2 * config.max_new_tokens
        assert row.prompt_tokens == sum(int(turn.input_ids.shape[1]) for turn in run.turns)
        assert [record["turn"] for record in row.turns] == [1, 2]
        assert [record["verdict"] for record in row.turns] == ["lossless", "lossless"]
        assert row.turns[1]["prompt_tokens"] > row.turns[0]["prompt_tokens"] + row.turns[0]["new_tokens"]
        assert row.pairing == "rounds" and MULTI_TURN_RUNS in row.pairing_reason


def test_a_wrong_token_in_the_second_turn_is_reported_there(tiny_turns):
    _, measured, run, config = _measured(tiny_turns)
    run.start_runs()
    result = run.run()
    second = config.max_new_tokens + 3
    planted = result.turns[1]  # the second turn's fourth new token made wrong: judged from the result alone
    planted.sequences = planted.sequences.clone()
    token = int(planted.sequences[0, planted.prompt_length + 3])
    planted.sequences[0, planted.prompt_length + 3] = (token + 1) % run.target.model.config.vocab_size
    judgement = run.judge(result)
    assert judgement.verdict["verdict"] == "diverged" and judgement.verdict["first_divergence"] == second
    assert [v["verdict"] for v in judgement.turn_verdicts] == ["lossless", "diverged"]


def test_a_multi_turn_answer_leaves_special_tokens_out():
    class _Tokenizer:
        def decode(self, tokens, skip_special_tokens):
            return " an answer </s>".replace(" </s>", "" if skip_special_tokens else " </s>")

    assert answer_text(_Tokenizer(), [1, 2]) == "an answer"


# --- through the plugin: a question file as Spec-Bench and MT-bench write it --------------------------------------


@pytest.mark.slow
def test_a_question_file_runs_turn_by_turn_lossless_with_the_leaderboard_view(bench, pytester: pytest.Pytester):
    import json

    questions = [
        {"question_id": 81, "category": "writing", "turns": ["Write a line about rain.", "Shorter, please."]},
        {"question_id": 201, "category": "translation", "turns": ["Say 'good day' in French."], "reference": ["x"]},
    ]
    pytester.path.joinpath("question.jsonl").write_text("\n".join(json.dumps(q) for q in questions) + "\n")
    result = bench(
        "--specbench-prompt-file=question.jsonl", "--specbench-json=out.json", prompts="mt_bench,translation"
    )
    result.assert_outcomes(passed=4)
    rows = {row["case"]: row for row in json.loads(pytester.path.joinpath("out.json").read_text())["results"]}
    assert sorted(rows) == ["tiny-k1-translation", "tiny-k1-writing", "tiny-k4-translation", "tiny-k4-writing"]
    for case, row in rows.items():
        assert row["lossless"] is True, case
        assert row["prompt_id"] == ("writing-81" if "writing" in case else "translation-201")
    writing = rows["tiny-k4-writing"]
    assert [turn["verdict"] for turn in writing["turns"]] == ["lossless", "lossless"]
    assert writing["new_tokens"] == sum(turn["new_tokens"] for turn in writing["turns"])
    assert rows["tiny-k4-translation"]["turns"] == []
    out = result.stdout.str()
    assert "mt_bench" in out and "Overall" in out  # the leaderboard view, for a question file


def test_a_pairs_header_counts_new_tokens_per_run_not_a_multi_turn_rows_sum() -> None:
    from factory import case_result

    from pytest_specbench.report.formatting import new_tokens_text

    two_turns = case_result(new_tokens=64, turns=[{"turn": 1, "new_tokens": 32}, {"turn": 2, "new_tokens": 32}])
    one_turn = case_result(new_tokens=32, turns=[])
    assert new_tokens_text([two_turns, one_turn]) == "32 new tokens"
    assert new_tokens_text([two_turns]) == "32 new tokens per turn"


# --- a second turn past the target's window, and the advice the failure gives ---------------------------------------


@pytest.fixture(scope="module")
def window_128(tmp_path_factory) -> Path:
    """Pair ``tiny`` whose target has 128 positions."""
    return write_tiny_pair(tmp_path_factory.mktemp("window_128"), target_config={"n_positions": 128})


@pytest.mark.slow
def test_the_advice_for_a_second_turn_past_the_window_works_for_a_one_question_file(
    bench, pytester: pytest.Pytester, window_128: Path
) -> None:
    # One question, so no other prompt pads the short first turn: --specbench-context-tokens only cuts the second.
    line = {"question_id": 81, "category": "writing", "turns": [QUESTION.text, "Again, " + "once more " * 8 + "?"]}
    path = pytester.path / "question.jsonl"
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    options = (f"--specbench-prompt-file={path}", "-k", "k4")
    failed = bench(*options, pairs_file=window_128, prompts="writing")
    failed.assert_outcomes(failed=1, deselected=1)
    advice = re.search(r"--specbench-context-tokens=(\d+) \(or fewer\)", failed.stdout.str())
    assert advice, failed.stdout.str()
    followed = bench(*options, f"--specbench-context-tokens={advice[1]}", pairs_file=window_128, prompts="writing")
    followed.assert_outcomes(passed=1, deselected=1)
    followed.stdout.fnmatch_lines([f"*--specbench-context-tokens={advice[1]} only cuts here*own length*"])
    [row] = json.loads((pytester.path / "spec_results.json").read_text(encoding="utf-8"))["results"]
    first, second = (turn["prompt_tokens"] for turn in row["turns"])
    assert first < int(advice[1]) == second
