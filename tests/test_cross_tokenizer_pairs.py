"""Pairs whose draft has another tokenizer (issue 37, the plugin's part): the pairs file, the store, the
refusals, the rows and their report, and one plugin run on a byte-level target with a word-level draft."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factory import WORDS, byte_gpt2, byte_tokenizer, case_result, save_checkpoint, word_gpt2, word_tokenizer

from pytest_specbench.cases.drafter_kinds import kind_refusal
from pytest_specbench.cases.matrix import Case
from pytest_specbench.cases.pairs import OPT_IN_PAIRS, PairError, PairSpec, load_pairs_file
from pytest_specbench.cases.prompts import Prompt
from pytest_specbench.measure.engines import ENGINES
from pytest_specbench.measure.store import ModelStore
from pytest_specbench.models.base import GEMMA3_270M_NAME, QWEN_CODER_0_5B_NAME, QWEN_CODER_1_5B_NAME
from pytest_specbench.models.tokenization import TokenizerMismatch
from pytest_specbench.report.markdown import report_markdown
from pytest_specbench.report.summary import cross_tokenizer_line, summary_lines

#: a prompt the word-level draft reads as words (its vocabulary is w3 .. w127)
WORD_PROMPT = "w5 w6 w7 w8 w9 w10 w5 w6 w7 w8 w9 w10 w5 w6 w7"


@pytest.fixture(scope="module")
def cross_pair_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level tiny target and a word-level tiny draft on disk, and a pairs file pairing them twice:
    ``cross`` marked cross_tokenizer, ``plain`` not."""
    root = tmp_path_factory.mktemp("cross_pair")
    save_checkpoint(byte_gpt2(seed=0), byte_tokenizer(), root / "target")
    save_checkpoint(word_gpt2(seed=1), word_tokenizer(WORDS), root / "draft")
    (root / "pairs.toml").write_text(
        '[pairs.cross]\ntarget = "./target"\ndraft = "./draft"\ncross_tokenizer = true\n'
        '[pairs.plain]\ntarget = "./target"\ndraft = "./draft"\n',
        encoding="utf-8",
    )
    (root / "prompts.jsonl").write_text(
        json.dumps({"id": "words", "category": "words", "text": WORD_PROMPT}) + "\n", encoding="utf-8"
    )
    return root


# --- the pairs file --------------------------------------------------------------------------------------------------


def test_a_pairs_file_marks_a_pair_cross_tokenizer(tmp_path: Path) -> None:
    path = tmp_path / "pairs.toml"
    path.write_text(
        '[pairs.mixed]\ntarget = "org/big"\ndraft = "other/small"\ncross_tokenizer = true\n'
        '[pairs.same]\ntarget = "org/big"\ndraft = "org/small"\ncross_tokenizer = false\n'
        '[pairs.default]\ntarget = "org/big"\ndraft = "org/small"\n'
    )
    pairs = load_pairs_file(path)
    assert [pairs[name].cross_tokenizer for name in ("mixed", "same", "default")] == [True, False, False]
    assert pairs["mixed"].draft_label == "other/small"  # the label is the draft's, marked or not
    assert pairs["mixed"].sources() == ("org/big", "other/small")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('target = "a"\ndraft = "b"\ncross_tokenizer = "yes"', "cross_tokenizer must be true or false, got 'yes'"),
        ('target = "a"\ndraft = "b"\ncross_tokenizer = 1', "cross_tokenizer must be true or false, got 1"),
        ('target = "a"\ndrafter = "int8"\ncross_tokenizer = true', 'only for drafter = "model"'),
        ('target = "a"\ndrafter = "prompt_lookup"\ncross_tokenizer = true', "not 'prompt_lookup'"),
    ],
)
def test_a_bad_cross_tokenizer_is_refused_naming_the_pair_and_the_file(tmp_path: Path, table: str, message: str):
    path = tmp_path / "pairs.toml"
    path.write_text(f"[pairs.odd]\n{table}\n")
    with pytest.raises(PairError, match="pair 'odd'") as info:
        load_pairs_file(path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_the_built_in_cross_tokenizer_pairs_run_only_when_named() -> None:
    big, small = OPT_IN_PAIRS["qwen_coder_gemma"], OPT_IN_PAIRS["qwen_coder_05b_gemma"]
    assert (big.target, big.draft, small.target, small.draft) == (
        QWEN_CODER_1_5B_NAME,
        GEMMA3_270M_NAME,
        QWEN_CODER_0_5B_NAME,
        GEMMA3_270M_NAME,
    )
    assert big.cross_tokenizer and small.cross_tokenizer and big.embedded and small.embedded
    assert all(not pair.cross_tokenizer for name, pair in OPT_IN_PAIRS.items() if not name.endswith("_gemma"))


# --- the store ------------------------------------------------------------------------------------------------------


def test_an_unmarked_pair_of_two_tokenizers_fails_saying_how_to_accept_it(cross_pair_dir: Path) -> None:
    pairs = load_pairs_file(cross_pair_dir / "pairs.toml")
    store = ModelStore("cpu", "float32")
    with pytest.raises(TokenizerMismatch) as info:
        store.drafter(pairs["plain"])
    assert "cross_tokenizer = true" in str(info.value) and "Drafts with another tokenizer" in str(info.value)
    assert store.vocabulary_overlap(pairs["plain"]) is None


def test_a_marked_pair_gets_a_cross_tokenizer_drafter_and_its_overlap_once(cross_pair_dir: Path, monkeypatch) -> None:
    from pytest_specbench.engine.cross_tokenizer import CrossTokenizerDrafter
    from pytest_specbench.models import tokenization

    pairs = load_pairs_file(cross_pair_dir / "pairs.toml")
    store = ModelStore("cpu", "float32")
    drafter = store.drafter(pairs["cross"])
    assert isinstance(drafter, CrossTokenizerDrafter)
    assert drafter.model is store.model(pairs["cross"].draft).model
    assert len(drafter.draft_tokenizer) == len(WORDS) and len(drafter.target_tokenizer) == 257
    calls = []
    real = tokenization.vocabulary_overlap
    monkeypatch.setattr(tokenization, "vocabulary_overlap", lambda *args: calls.append(args) or real(*args))
    overlap = store.vocabulary_overlap(pairs["cross"])
    assert 0.0 <= overlap <= 1.0 and store.vocabulary_overlap(pairs["cross"], "float32") == overlap
    assert len(calls) == 1


# --- refusals -------------------------------------------------------------------------------------------------------


def _case(pair: PairSpec, engine: str = "native", batch: int = 1) -> Case:
    prompt = Prompt(id="words", category="words", text=WORD_PROMPT)
    return Case(pair, 4, prompt, "words", engine=engine, batch=batch)


@pytest.mark.parametrize("engine", ["native", "hf"])
def test_a_cross_tokenizer_pair_is_refused_at_batch_and_under_sampling(engine: str) -> None:
    cross = PairSpec("mixed", "org/big", "other/small", cross_tokenizer=True)
    same = PairSpec("same", "org/big", "org/small")
    batch_reason = ENGINES[engine].refusal(_case(cross, engine, batch=2), None)
    assert batch_reason is not None and "batch 1 only" in batch_reason and "mixed" in batch_reason
    assert ENGINES[engine].refusal(_case(cross, engine), None) is None
    sampling_reason = ENGINES[engine].refusal(_case(cross, engine), temperature=0.8)
    assert sampling_reason is not None and "greedy only" in sampling_reason and "temperature=0.8" in sampling_reason
    assert kind_refusal(cross, temperature=0.0) is None
    assert kind_refusal(same, batch=2, temperature=0.8) is None  # other pairs: the usual refusals


def test_the_hf_engine_skips_a_pair_of_equal_vocab_sizes_which_transformers_refuses() -> None:
    from pytest_specbench.engine.cross_tokenizer import CrossTokenizerDrafter

    cross = PairSpec("mixed", "org/big", "other/small", cross_tokenizer=True)
    target = byte_gpt2(seed=0)
    same_size = CrossTokenizerDrafter(byte_gpt2(seed=1), word_tokenizer(WORDS), byte_tokenizer())
    other_size = CrossTokenizerDrafter(word_gpt2(seed=1), word_tokenizer(WORDS), byte_tokenizer())
    reason = ENGINES["hf"].refusal(_case(cross, "hf"), same_size, target)
    assert reason is not None and "mixed" in reason and "equals the target's (257)" in reason
    assert ENGINES["hf"].refusal(_case(cross, "hf"), other_size, target) is None
    assert ENGINES["native"].refusal(_case(cross), same_size, target) is None  # the native engine runs it


# --- rows and their report ------------------------------------------------------------------------------------------


def test_the_report_shows_the_overlap_and_translation_only_for_such_a_pair() -> None:
    cross = [
        case_result(case=f"mixed-k{k}-natural", pair="mixed", k=k, vocabulary_overlap=0.41, translation_share=share)
        for k, share in ((1, 0.03), (4, 0.034))
    ]
    same = [case_result(case="same-k4-natural", pair="same", k=4)]
    line = cross_tokenizer_line(cross)
    assert line is not None and "vocabulary overlap 0.41" in line and "translation 3.2% of draft time" in line
    assert "per target token" in line
    assert cross_tokenizer_line(same) is None
    hf_only = [case_result(pair="mixed", vocabulary_overlap=0.5, translation_share=None)]
    assert "not timed apart" in (cross_tokenizer_line(hf_only) or "")
    terminal = "\n".join(summary_lines(cross + same))
    assert terminal.count("draft tokenizer differs") == 1
    report = report_markdown(cross + same, {}, {})
    assert report.count("Draft tokenizer differs: vocabulary overlap 0.41") == 1


# --- one plugin run -------------------------------------------------------------------------------------------------


def _run(pytester: pytest.Pytester, bench_module: Path, root: Path, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_speculative=bench_module.read_text(encoding="utf-8"))
    return pytester.runpytest(
        f"--specbench-pairs-file={root / 'pairs.toml'}",
        "--specbench-pairs=cross",
        f"--specbench-prompt-file={root / 'prompts.jsonl'}",
        "--specbench-prompts=words",
        "--specbench-max-new-tokens=12",
        "--specbench-warmup=1",
        "--specbench-min-rounds=1",
        "--specbench-max-rounds=1",
        "--specbench-dtype=float32",
        "--benchmark-disable",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-rs",
        *args,
    )


@pytest.mark.slow  # two pytester runs of tiny models: seconds
def test_a_byte_target_with_a_word_draft_runs_lossless_on_both_engines(
    pytester: pytest.Pytester, cross_pair_dir: Path
) -> None:
    from conftest import BENCH_MODULE

    result = _run(
        pytester,
        BENCH_MODULE,
        cross_pair_dir,
        "--specbench-engine=native,hf",
        "--specbench-k=1,4",
        "--specbench-batch=1,2",
        "--specbench-json=out.json",
        "--specbench-report=report.md",
    )
    result.assert_outcomes(passed=4, skipped=4)
    result.stdout.fnmatch_lines(["SKIPPED [[]4[]] *pair cross's draft has another tokenizer*batch 1 only, not 2"])
    rows = {row["case"]: row for row in json.loads((pytester.path / "out.json").read_text())["results"]}
    assert sorted(rows) == sorted(f"cross-{engine}-k{k}-b1-words" for engine in ("native", "hf") for k in (1, 4))
    for case, row in rows.items():
        assert row["verdict"] == "lossless" and row["lossless"] is True, case
        assert 0.0 <= row["vocabulary_overlap"] <= 1.0, case
    overlaps = {row["vocabulary_overlap"] for row in rows.values()}
    assert len(overlaps) == 1  # one pair, one overlap
    for k in (1, 4):
        native = rows[f"cross-native-k{k}-b1-words"]
        assert native["translation_share"] is not None and 0.0 < native["translation_share"] <= 1.0
        assert native["draft_cost_source"] == "runs"  # c re-timed in the runs, translation included
        assert native["cost_ratio"] > 0
        assert rows[f"cross-hf-k{k}-b1-words"]["translation_share"] is None  # inside transformers, not timed apart
    assert "draft tokenizer differs: vocabulary overlap" in result.stdout.str()
    assert "Draft tokenizer differs" in (pytester.path / "report.md").read_text()

    sampled = _run(pytester, BENCH_MODULE, cross_pair_dir, "--specbench-k=1", "--specbench-temperature=0.8")
    sampled.assert_outcomes(skipped=1)
    assert "greedy only" in sampled.stdout.str()
