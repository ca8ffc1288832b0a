"""The lossless reference never guesses a mask: prompts holding id 0, the pad, BOS and EOS ids.

transformers' ``generate`` infers an attention mask from the pad id when none is passed, so a prompt
token equal to the pad id (id 0 is "!" in GPT-2, Qwen2.5 and Llama-3, and the first byte of a byte-level
vocabulary) would be masked out of the reference. The truth every test here compares with is the
target's ``generate`` with an explicit all-ones mask.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import pytest
import torch
from factory import hf_generate, tiny_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import PreTrainedModel

from pytest_specbench.engine.batched import batched_speculative_generate, left_pad
from pytest_specbench.engine.decoding import speculative_generate
from pytest_specbench.engine.derived_models import int8_copy, truncated_copy
from pytest_specbench.engine.drafters import Drafter, ModelDrafter, PromptLookupDrafter
from pytest_specbench.engine.hf_assisted import hf_assisted_generate
from pytest_specbench.engine.plain_generate import own_pad_token_id
from pytest_specbench.measure import batches, verdicts
from pytest_specbench.measure.verdicts import reference_tokens

NEW_TOKENS = 10
VOCAB = 96
_models: dict[str, PreTrainedModel] = {}  # the property test's models, built once

#: Real tokenizers' special-token conventions, on tiny models of the shared vocabulary:
#: (architecture, config overrides, the pad id the generation config carries).
CONVENTIONS: dict[str, tuple[str, dict, int | None]] = {
    # GPT-2: no pad; BOS = EOS = <|endoftext|>; "!" is id 0.
    "gpt2": ("gpt2", dict(pad_token_id=None, bos_token_id=95, eos_token_id=95), None),
    # Qwen2.5: pad <|endoftext|>, EOS <|im_end|>, no BOS; "!" is id 0.
    "qwen2.5": ("llama", dict(pad_token_id=94, bos_token_id=None, eos_token_id=95), 94),
    # Llama-3: BOS <|begin_of_text|>, EOS <|end_of_text|>, no pad; "!" is id 0.
    "llama-3": ("llama", dict(pad_token_id=None, bos_token_id=93, eos_token_id=95), None),
    # Gemma 3: <pad> 0, <eos> 1, <bos> 2.
    "gemma-3": ("gemma3", dict(pad_token_id=0, bos_token_id=2, eos_token_id=1), 0),
}


def convention_model(name: str) -> PreTrainedModel:
    arch, overrides, generation_pad = CONVENTIONS[name]
    model = tiny_model(arch, **overrides)
    model.generation_config.pad_token_id = generation_pad
    model.generation_config.bos_token_id = overrides["bos_token_id"]
    model.generation_config.eos_token_id = overrides["eos_token_id"]
    return model


def special_ids(model: PreTrainedModel) -> list[int]:
    """Id 0 and the model's pad, BOS and EOS ids: the ids a guessed mask would hide."""
    config = model.config
    found = [0, config.pad_token_id, config.bos_token_id, config.eos_token_id]
    return sorted({token for token in found if token is not None})


def prompts_with_special_ids(model: PreTrainedModel) -> list[list[int]]:
    """Prompts with those ids in their middle, at their start, and repeated."""
    specials = special_ids(model)
    middle = [5]
    for token in specials:
        middle += [token, 7 + token % 5]
    return [middle + [11, 12], [specials[-1], 9, 0, 0, 10, 13], [20, 21, 0, 22, 0, 23, 0, 24]]


def truth(model: PreTrainedModel, prompt: Sequence[int], max_new_tokens: int = NEW_TOKENS) -> list[int]:
    """The target's generate() with an explicit all-ones mask, EOS ignored."""
    return hf_generate(model, prompt, max_new_tokens)


def drafters_of(target: PreTrainedModel) -> dict[str, Drafter]:
    """Every kind of drafter, the target itself first: a draft equal to its target."""
    return {
        "itself": ModelDrafter(target),
        "int8": ModelDrafter(int8_copy(target)),
        "truncated": ModelDrafter(truncated_copy(target, 1)),
        "prompt_lookup": PromptLookupDrafter(),
    }


@pytest.fixture(scope="module", params=sorted(CONVENTIONS))
def convention(request) -> tuple[str, PreTrainedModel]:
    return request.param, convention_model(request.param)


def test_the_pad_id_given_to_generate_is_the_models_own() -> None:
    assert own_pad_token_id(convention_model("gpt2")) == 95  # no pad: its EOS
    assert own_pad_token_id(convention_model("qwen2.5")) == 94
    assert own_pad_token_id(convention_model("llama-3")) == 95
    assert own_pad_token_id(convention_model("gemma-3")) == 0
    bare = tiny_model("gpt2", pad_token_id=None, bos_token_id=None, eos_token_id=None)
    bare.generation_config.pad_token_id = bare.generation_config.eos_token_id = None
    assert own_pad_token_id(bare) is None  # nothing made up


def test_the_prompts_would_be_masked_if_generate_guessed(convention) -> None:
    """The test prompts bite: a guessed mask with pad id 0 (the old default) changes the output."""
    _, model = convention
    changed = 0
    for prompt in prompts_with_special_ids(model):
        ids = torch.tensor([prompt])
        with torch.inference_mode():
            guessed = model.generate(
                ids, do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=None, pad_token_id=0
            )[0, ids.shape[1] :].tolist()
        changed += guessed != truth(model, prompt)
    assert changed >= 2


def test_the_reference_is_generate_with_the_whole_prompt_attended(convention) -> None:
    _, model = convention
    for prompt in prompts_with_special_ids(model):
        assert reference_tokens(model, torch.tensor([prompt]), NEW_TOKENS, None) == truth(model, prompt), prompt


def test_the_reference_runs_past_the_models_own_eos_when_eos_is_ignored() -> None:
    """transformers fills a config's "no EOS" from the model's own; the reference must not stop there."""
    model = convention_model("gemma-3")
    prompt = [12]  # its greedy continuation writes EOS (id 1) at new token 7
    right = truth(model, prompt, 8)
    assert len(right) == 8 and right.index(1) < 7
    assert reference_tokens(model, torch.tensor([prompt]), 8, None) == right


def test_a_checkpoints_generation_knobs_do_not_reach_the_greedy_reference() -> None:
    """A knob in the checkpoint's generation config (here: suppress the greedy first token) changes what
    generate() picks; the reference is the target's plain greedy output all the same."""
    model = convention_model("llama-3")
    prompt = [5, 6, 5, 6, 5, 6]
    plain = truth(model, prompt)
    model.generation_config.suppress_tokens = [plain[0]]
    model.generation_config.repetition_penalty = 1.3
    assert truth(model, prompt) != plain  # the knobs bite when generate() is left to fill its config
    assert reference_tokens(model, torch.tensor([prompt]), NEW_TOKENS, None) == plain


def test_a_planted_bug_that_drops_the_mask_is_caught(monkeypatch) -> None:
    """The check above fails when reference_tokens' generate() call loses its attention mask."""
    model = convention_model("qwen2.5")
    prompts = prompts_with_special_ids(model)
    truths = [truth(model, prompt) for prompt in prompts]
    generate = model.generate

    def without_mask(*args, **kwargs):
        kwargs.pop("attention_mask", None)
        return generate(*args, **kwargs)

    monkeypatch.setattr(model, "generate", without_mask)
    wrong = [
        prompt
        for prompt, right in zip(prompts, truths)
        if reference_tokens(model, torch.tensor([prompt]), NEW_TOKENS, None) != right
    ]
    assert wrong, "a reference without its mask went unnoticed"


@pytest.mark.slow
def test_every_drafter_is_lossless_on_such_prompts_at_batch_1_and_above(convention) -> None:
    """A draft equal to its target, and every other drafter, equals the reference, unbatched and batched."""
    _, target = convention
    prompts = prompts_with_special_ids(target)
    references = [reference_tokens(target, torch.tensor([p]), NEW_TOKENS, None) for p in prompts]
    pad = own_pad_token_id(target) or 0
    ids, mask = left_pad(prompts, pad_token_id=pad)
    for name, drafter in drafters_of(target).items():
        for prompt, reference in zip(prompts, references):
            for k in (1, 4):
                run = speculative_generate(target, drafter, torch.tensor([prompt]), k, NEW_TOKENS)
                assert run.token_ids == reference, (name, k, prompt)
        per_row = drafter.model if isinstance(drafter, ModelDrafter) else [PromptLookupDrafter() for _ in prompts]
        batch = batched_speculative_generate(target, per_row, ids, mask, 3, NEW_TOKENS, pad_token_id=pad)
        assert [row.token_ids for row in batch] == references, name


@pytest.mark.slow
def test_the_hf_engine_is_lossless_on_such_prompts(convention) -> None:
    _, target = convention
    for prompt in prompts_with_special_ids(target):
        reference = reference_tokens(target, torch.tensor([prompt]), NEW_TOKENS, None)
        for drafter in (ModelDrafter(copy.deepcopy(target)), PromptLookupDrafter()):
            run = hf_assisted_generate(target, drafter, torch.tensor([prompt]), 3, NEW_TOKENS)
            assert run.token_ids == reference


def test_the_batch_references_agree_on_such_prompts(convention) -> None:
    """The batched reference (the batch's own mask) and the unbatched one (all ones) give each row the same."""
    _, target = convention
    prompts = prompts_with_special_ids(target)
    ids, mask = left_pad(prompts, pad_token_id=0)  # pads with id 0: only the mask may say what is padding
    batched = batches.batched_reference(target, ids, mask, NEW_TOKENS, None)
    assert batched == [truth(target, prompt) for prompt in prompts]


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(CONVENTIONS)), data=st.data())
def test_property_reference_and_self_draft_on_prompts_full_of_special_ids(name: str, data) -> None:
    """Random prompts where id 0, the pad, BOS and EOS ids make up about half of the tokens."""
    model = _models.setdefault(name, convention_model(name))
    specials = special_ids(model)
    token = st.one_of(st.sampled_from(specials), st.integers(0, VOCAB - 1))
    prompt = data.draw(st.lists(token, min_size=1, max_size=24), label="prompt")
    k = data.draw(st.integers(1, 6), label="k")
    reference = reference_tokens(model, torch.tensor([prompt]), 8, None)
    assert reference == truth(model, prompt, 8)
    assert speculative_generate(model, ModelDrafter(model), torch.tensor([prompt]), k, 8).token_ids == reference


def test_the_verdict_of_a_self_draft_is_lossless_on_such_prompts(convention) -> None:
    """Through the verdict the plugin gives: the case's output against the reference."""
    _, target = convention
    for prompt in prompts_with_special_ids(target):
        ids = torch.tensor([prompt])
        tokens = speculative_generate(target, ModelDrafter(target), ids, 4, NEW_TOKENS).token_ids
        reference = reference_tokens(target, ids, NEW_TOKENS, None)
        assert verdicts.diagnose(target, None, ids, tokens, reference, False, 0.1)["verdict"] == "lossless"


# --- through the plugin ------------------------------------------------------------------------

EXCLAIMING_PROMPTS = [
    {"id": "wow-1", "category": "exclaiming", "text": "Wow! That is great! Tell me more about it!"},
    {"id": "wow-2", "category": "exclaiming", "text": "Stop!! Look out! The sky is falling!"},
]


@pytest.mark.slow
def test_a_self_draft_is_lossless_through_the_plugin_on_prompts_holding_id_0(bench, pytester, tmp_path) -> None:
    """Every drafter of one byte-level target ("!" is its id 0 and its generation pad id), batch 1 and 2."""
    import json
    from pathlib import Path

    from factory import byte_gpt2, byte_tokenizer, save_checkpoint

    tokenizer = byte_tokenizer()
    assert tokenizer("!").input_ids == [0]
    save_checkpoint(byte_gpt2(seed=0), tokenizer, tmp_path / "target")
    pairs = tmp_path / "pairs.toml"
    pairs.write_text(
        '[pairs.itself]\ntarget = "./target"\ndraft = "./target"\n'
        '[pairs.int8]\ntarget = "./target"\ndrafter = "int8"\n'
        '[pairs.cut]\ntarget = "./target"\ndrafter = "truncated"\nnum_layers = 1\n'
        '[pairs.lookup]\ntarget = "./target"\ndrafter = "prompt_lookup"\n',
        encoding="utf-8",
    )
    prompts = tmp_path / "exclaiming.jsonl"
    prompts.write_text("".join(json.dumps(prompt) + "\n" for prompt in EXCLAIMING_PROMPTS), encoding="utf-8")
    result = bench(
        f"--specbench-prompt-file={prompts}",
        "--specbench-pairs=itself,int8,cut,lookup",
        "--specbench-batch=1,2",
        "--specbench-k=2",
        pairs_file=pairs,
        prompts="exclaiming",
    )
    result.assert_outcomes(passed=8)
    rows = json.loads(Path(pytester.path, "spec_results.json").read_text())["results"]
    assert len(rows) == 8
    assert {row["case"]: row["verdict"] for row in rows} == {row["case"]: "lossless" for row in rows}
    assert all(verdict == "lossless" for row in rows for verdict in (row.get("row_verdicts") or []))
