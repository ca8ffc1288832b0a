"""The peer engine: transformers' assisted generation, run and read like this package's engine.

Its output is checked against transformers' plain greedy ``generate``; its counts are read from the
target's forward passes and checked against what a run must have done (a draft equal to the target
accepts everything, so every step's drafted and accepted counts are known in advance).
"""

from __future__ import annotations

import copy
import functools
import json

import pytest
import torch
from factory import REPETITIVE_PROMPT, hf_generate, tiny_model, tiny_pair

from pytest_specbench.engine.drafters import ModelDrafter, PromptLookupDrafter
from pytest_specbench.engine.forward_log import ForwardCall
from pytest_specbench.engine.hf_assisted import _step_counts, hf_assisted_generate

PROMPT = [30, 31, 32, 7, 9]
NEW_TOKENS = 21


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@functools.cache
def pair(arch: str):
    return tiny_pair(arch)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("k", [1, 3, 8, "heuristic", "auto"])
def test_hf_engine_is_lossless_and_its_counts_add_up(arch: str, k) -> None:
    target, draft = pair(arch)
    result = hf_assisted_generate(target, ModelDrafter(draft), torch.tensor([PROMPT]), k, NEW_TOKENS)
    assert result.token_ids == hf_generate(target, PROMPT, NEW_TOKENS)
    stats = result.stats
    assert stats.new_tokens == NEW_TOKENS
    assert stats.target_forward_passes == stats.steps == len(stats.drafted_per_step)
    # Every step commits what it accepted plus the target's own token.
    assert sum(stats.accepted_per_step) + stats.steps == NEW_TOKENS
    assert all(0 <= a <= d for d, a in zip(stats.drafted_per_step, stats.accepted_per_step))
    assert stats.draft_forward_passes >= 1
    if isinstance(k, int):
        assert max(stats.drafted_per_step) <= k  # the constant k reached the assistant's config
    assert stats.prefill_tokens == stats.accepted_per_step[0] + 1
    assert 0 < stats.prefill_time_s <= stats.wall_time_s


@pytest.mark.parametrize("k", [2, 4])
def test_hf_engine_counts_match_a_draft_that_accepts_everything(k: int) -> None:
    target = tiny_model("gpt2")
    result = hf_assisted_generate(target, ModelDrafter(copy.deepcopy(target)), torch.tensor([PROMPT]), k, NEW_TOKENS)
    stats = result.stats
    # Blocks of k drafted + 1 bonus; transformers drafts at most what still fits before the last token.
    drafted, made = [], 0
    while made < NEW_TOKENS:
        d = min(k, NEW_TOKENS - made - 1)
        drafted.append(d)
        made += d + 1
    assert stats.drafted_per_step == drafted
    assert stats.accepted_per_step == drafted
    assert result.token_ids == hf_generate(target, PROMPT, NEW_TOKENS)


def test_constant_k_is_set_on_the_assistant_and_restored() -> None:
    # transformers 5 reads the draft length from the assistant's generation_config: k given anywhere else
    # would leave the assistant drafting its default 20 tokens, which the drafted counts would show.
    target = tiny_model("gpt2")
    assistant = copy.deepcopy(target)
    assistant.generation_config.num_assistant_tokens = 7
    assistant.generation_config.num_assistant_tokens_schedule = "heuristic"
    before = assistant.generation_config.to_dict()
    result = hf_assisted_generate(target, ModelDrafter(assistant), torch.tensor([PROMPT]), 3, NEW_TOKENS)
    assert max(result.stats.drafted_per_step) == 3
    assert assistant.generation_config.to_dict() == before
    # The heuristic schedule would write its final length back into the config; the restore undoes it.
    hf_assisted_generate(target, ModelDrafter(assistant), torch.tensor([PROMPT]), "auto", NEW_TOKENS)
    assert assistant.generation_config.to_dict() == before


def test_prompt_lookup_through_transformers() -> None:
    target = tiny_model("gpt2")
    drafter = PromptLookupDrafter(ngram_size=3)
    result = hf_assisted_generate(target, drafter, torch.tensor([REPETITIVE_PROMPT]), 4, NEW_TOKENS)
    assert result.token_ids == hf_generate(target, REPETITIVE_PROMPT, NEW_TOKENS)
    stats = result.stats
    assert stats.draft_forward_passes == 0
    assert sum(stats.accepted_per_step) + stats.steps == NEW_TOKENS
    assert max(stats.drafted_per_step) <= 4
    with pytest.raises(ValueError, match="no draft-length schedule"):
        hf_assisted_generate(target, drafter, torch.tensor([REPETITIVE_PROMPT]), "auto", NEW_TOKENS)


def test_step_counts_by_hand() -> None:
    # Prompt of 5; the first pass feeds the prompt and 3 drafts and commits 2 (1 accepted + bonus); the
    # second starts on a cache of 6 (7 committed, the newest fed again) with 3 drafts and commits 4.
    calls = [ForwardCall(cached=0, fed=8, start_s=0.0), ForwardCall(cached=6, fed=4, start_s=1.0)]
    assert _step_counts(calls, prompt_length=5, final_length=11) == ([3, 3], [1, 3])


def test_hf_engine_refuses_what_is_neither_a_draft_model_nor_prompt_lookup() -> None:
    target = tiny_model("gpt2")
    with pytest.raises(TypeError, match="a transformers PreTrainedModel or a Drafter, got object"):
        hf_assisted_generate(target, object(), torch.tensor([PROMPT]), 2, NEW_TOKENS)
    from pytest_specbench.engine.drafters import PromptLookupDrafter, RowDrafters

    rows = RowDrafters([PromptLookupDrafter()])  # a Drafter that transformers has no method for
    with pytest.raises(TypeError, match="draft model or prompt lookup, got RowDrafters"):
        hf_assisted_generate(target, rows, torch.tensor([PROMPT]), 2, NEW_TOKENS)


def test_hf_engine_refuses_a_draft_that_is_the_target_object_and_the_plugin_skips_such_a_pair() -> None:
    """One module for both: its forward hooks would count the draft's passes as the target's (and the reverse),
    so the counts would be nonsense; a copy of it is a draft like any other."""
    from pytest_specbench.cases.matrix import Case
    from pytest_specbench.cases.pairs import PairSpec
    from pytest_specbench.cases.prompts import Prompt
    from pytest_specbench.measure.engines import ENGINES, HF_SELF_DRAFT_REFUSAL

    target = tiny_model("gpt2")
    with pytest.raises(ValueError, match="the draft is the target itself"):
        hf_assisted_generate(target, ModelDrafter(target), torch.tensor([PROMPT]), 2, NEW_TOKENS)
    copied = hf_assisted_generate(target, ModelDrafter(copy.deepcopy(target)), torch.tensor([PROMPT]), 2, NEW_TOKENS)
    assert copied.stats.accepted_per_step[1:] == copied.stats.drafted_per_step[1:]  # a copy accepts everything
    prompt = Prompt("p", "natural", "text")
    itself = PairSpec("itself", "./m", "./m")
    refusal = ENGINES["hf"].refusal(Case(itself, 2, prompt, "natural", engine="hf"), None)
    assert refusal is not None and HF_SELF_DRAFT_REFUSAL in refusal
    assert ENGINES["hf"].refusal(Case(PairSpec("other", "./m", "./d"), 2, prompt, "natural", engine="hf"), None) is None


# --- through the plugin ----------------------------------------------------------------------


@pytest.mark.slow
def test_two_engines_run_side_by_side(bench, pytester: pytest.Pytester, tiny_pairs_file) -> None:
    # The tiny pair plus prompt lookup on its target: transformers has no schedule for prompt lookup.
    pairs = pytester.path / "pairs.toml"
    pairs.write_text(
        tiny_pairs_file.read_text(encoding="utf-8").replace('"./', f'"{tiny_pairs_file.parent}/')
        + f'[pairs.tiny_pld]\ntarget = "{tiny_pairs_file.parent}/target"\ndrafter = "prompt_lookup"\n',
        encoding="utf-8",
    )
    result = bench(
        "--specbench-engine=native,hf",
        "--specbench-k=2,auto",
        "--specbench-prompts=natural",
        f"--specbench-pairs-file={pairs}",
        "--specbench-pairs=tiny,tiny_pld",
        "--specbench-json=results.json",
        "-v",
        "-rs",
    )
    # dict.fromkeys: the run's estimate, written during the first case, makes -v print that case's name again
    ids = list(
        dict.fromkeys(
            line.split("[")[1].split("]")[0] for line in result.stdout.lines if "::test_speculative_decoding[" in line
        )
    )
    assert ids == [
        "tiny-native-k2-natural",
        "tiny-hf-k2-natural",
        "tiny-native-kauto-natural",
        "tiny-hf-kauto-natural",
        "tiny_pld-native-k2-natural",
        "tiny_pld-hf-k2-natural",
        "tiny_pld-native-kauto-natural",
        "tiny_pld-hf-kauto-natural",
    ]
    result.assert_outcomes(passed=7, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*no draft-length schedule*pair tiny_pld at integer k only, not k=auto*"])
    result.stdout.fnmatch_lines(["*engines side by side*", "*dtype*k*prompts*figure*native*hf*hf / native*"])
    rows = {row["case"]: row for row in json.loads((pytester.path / "results.json").read_text())["results"]}
    assert rows["tiny-hf-k2-natural"]["engine"] == "hf" and rows["tiny-hf-k2-natural"]["k"] == 2
    assert rows["tiny-native-kauto-natural"]["k"] == "auto"
    assert all(row["verdict"] == "lossless" for row in rows.values())
    auto = rows["tiny-native-kauto-natural"]
    assert len(auto["k_per_step"]) == len(auto["drafted_per_step"]) and auto["predicted_speedup"] is None
    assert max(rows["tiny-hf-k2-natural"]["drafted_per_step"]) <= 2


def test_a_single_engine_keeps_the_short_ids(bench) -> None:
    result = bench("--collect-only", "-q", "--specbench-engine=hf", "--specbench-k=3,heuristic")
    ids = [line.split("[")[1].rstrip("]") for line in result.stdout.lines if "::test_speculative_decoding[" in line]
    assert ids == ["tiny-k3-natural", "tiny-kheuristic-natural", "tiny-k3-code_json", "tiny-kheuristic-code_json"]


def test_every_drafter_transformers_runs_has_its_assisted_method():
    # Each way of drafting transformers has is declared once (hf_assisted.ASSISTED_METHODS), and every drafter
    # class that names one names a declared one.
    from pytest_specbench.engine import cross_tokenizer, drafters
    from pytest_specbench.engine.hf_assisted import ASSISTED_METHODS

    classes = [drafters.ModelDrafter, drafters.PromptLookupDrafter, cross_tokenizer.CrossTokenizerDrafter]
    assert {cls.assisted_by for cls in classes} == set(ASSISTED_METHODS)
