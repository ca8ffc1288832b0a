"""Tiny models, tokenizers and checkpoints for the tests.

The models and tokenizers themselves are built in :mod:`pytest_specbench.testing.tiny_models`, which the
benchmark scripts use too (one builder, so the seeds and configs cannot drift apart); this module
re-exports them under the names the tests import, and adds what only the tests need:

- :func:`write_tiny_pair` and :func:`write_tiny_gguf` put models on disk for the loading and plugin tests;
- :func:`hf_generate`, :func:`top2_margins` and :func:`same_logits` give references to compare with;
- :func:`torch_threads` runs a block on a given number of torch threads.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from transformers import LlamaForCausalLM, PreTrainedModel

from pytest_specbench.results.schema import CaseResult
from pytest_specbench.testing.tiny_models import (
    ARCHITECTURES,
    BOS_TOKEN_ID,
    BYTE_EOS,
    DRAFT_NOISE,
    EOS_TOKEN_ID,
    MAX_POSITIONS,
    PAD_TOKEN_ID,
    REPETITIVE_PROMPT,
    SERVED_LLAMA,
    SLIDING_WINDOW,
    VOCAB_SIZE,
    WORDS,
    byte_gpt2,
    byte_tokenizer,
    char_tokenizer,
    noisy_copy,
    save_checkpoint,
    small_draft,
    tiny_config,
    tiny_model,
    tiny_pair,
    word_gpt2,
    word_tokenizer,
)

#: the tests import these names from here, the shared builders among them
__all__ = [
    "benchmark_script",
    "ARCHITECTURES",
    "BOS_TOKEN_ID",
    "BYTE_EOS",
    "DEFAULT_RUN_ROW",
    "DRAFT_NOISE",
    "EOS_TOKEN_ID",
    "MAX_POSITIONS",
    "NEW_TOKENS",
    "PAD_TOKEN_ID",
    "REPETITIVE_PROMPT",
    "SLIDING_WINDOW",
    "VOCAB_SIZE",
    "WORDS",
    "byte_gpt2",
    "case_result",
    "gated_case",
    "byte_tokenizer",
    "char_tokenizer",
    "hf_generate",
    "hub_snapshot",
    "noisy_copy",
    "run_document",
    "same_logits",
    "save_checkpoint",
    "small_draft",
    "tiny_config",
    "tiny_model",
    "tiny_pair",
    "top2_margins",
    "torch_threads",
    "word_gpt2",
    "word_tokenizer",
    "write_tiny_gguf",
    "write_tiny_pair",
]

# --- on disk --------------------------------------------------------------------------


def write_tiny_pair(
    root: Path,
    name: str = "tiny",
    noise: float = 0.01,
    *,
    target_config: dict | None = None,
    draft_config: dict | None = None,
) -> Path:
    """Save a byte-level target and a draft under ``root`` and return a pairs TOML naming them.

    The draft adds absolute weight noise of ``noise`` to the target: 0.01 agrees
    often, 0.2 (the gate tests' weak draft) much less. ``target_config`` overrides
    the target's config fields; with ``draft_config`` the draft is a separate
    :func:`byte_gpt2` with those fields instead of a noisy copy.
    """
    target = byte_gpt2(seed=0, **(target_config or {}))
    save_checkpoint(target, byte_tokenizer(), root / "target")
    draft = byte_gpt2(seed=1, **draft_config) if draft_config else noisy_copy(target, noise, seed=1, relative=False)
    save_checkpoint(draft, byte_tokenizer(), root / "draft")
    pairs_file = root / "pairs.toml"
    pairs_file.write_text(
        f'[pairs.{name}]\ntarget = "./target"\ndraft = "./draft"\ndescription = "tiny test pair"\n',
        encoding="utf-8",
    )
    return pairs_file


#: the vLLM lane's interpreter: ``SPECBENCH_VLLM_PYTHON``, else the environment scripts/make-vllm-env.sh makes
VLLM_PYTHON = Path(
    os.environ.get("SPECBENCH_VLLM_PYTHON", Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python")
)
#: the marks of a vLLM lane module: slow, and skipped with the reason where no vLLM environment exists
VLLM_LANE = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not VLLM_PYTHON.is_file(),
        reason=f"no vLLM environment at {VLLM_PYTHON}: scripts/make-vllm-env.sh cpu makes one (docs/served.md)",
    ),
]

#: the llama.cpp lane's server: ``SPECBENCH_LLAMACPP_SERVER``, else the binary scripts/make-llamacpp.sh builds
LLAMACPP_SERVER = Path(
    os.environ.get(
        "SPECBENCH_LLAMACPP_SERVER",
        Path(__file__).resolve().parents[1] / ".llama.cpp" / "build" / "bin" / "llama-server",
    )
)
#: the marks of a llama.cpp lane module: slow, and skipped with the reason where no llama-server exists
LLAMACPP_LANE = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not LLAMACPP_SERVER.is_file(),
        reason=f"no llama-server at {LLAMACPP_SERVER}: scripts/make-llamacpp.sh builds one (docs/served.md)",
    ),
]


def served_llama(directory: Path, seed: int | None = None) -> Path:
    """A tiny byte-level Llama saved to ``directory``, in a shape vLLM's CPU build serves (head size 64)."""
    model = tiny_model("llama", seed=seed, **SERVED_LLAMA)
    model.generation_config.pad_token_id = SERVED_LLAMA["pad_token_id"]
    return save_checkpoint(model, byte_tokenizer(), directory)


def hub_snapshot(hub: Path, repo_id: str, commit: str = "0" * 40) -> Path:
    """The snapshot folder of ``repo_id`` in the Hugging Face hub cache ``hub`` (``models--org--name/snapshots/
    <commit>``, with ``refs/main`` naming it), created empty: save a checkpoint there to fake a cached model."""
    repo = hub / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def write_tiny_gguf(path: Path, seed: int = 0) -> LlamaForCausalLM:
    """Write a 2-layer Llama with a byte-level BPE vocabulary as an F32 GGUF file; return the model."""
    gguf = pytest.importorskip("gguf")
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    merges = ["Ġ t", "h e", "Ġt he", "i n", "a n"]
    tokens = ["<unk>", "<s>", "</s>", *bytes_to_unicode().values(), *(m.replace(" ", "") for m in merges)]
    model = tiny_model(
        "llama", seed, vocab_size=len(tokens), pad_token_id=None, hidden_size=32, intermediate_size=64,
        max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
    )  # fmt: skip
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-test-llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_dimension_count(config.hidden_size // heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3))
    writer.add_token_merges(merges)
    writer.add_bos_token_id(BOS_TOKEN_ID)
    writer.add_eos_token_id(EOS_TOKEN_ID)
    writer.add_unk_token_id(0)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    for key, tensor in model.state_dict().items():
        array = tensor.detach().float().numpy()
        if key.endswith(("q_proj.weight", "k_proj.weight")):
            # llama.cpp stores q/k rows permuted for its rotary layout; transformers undoes it on load.
            rows = heads if "q_proj" in key else kv_heads
            array = array.reshape(rows, 2, array.shape[0] // rows // 2, *array.shape[1:])
            array = array.swapaxes(1, 2).reshape(tensor.shape)
        writer.add_tensor(names.get_name(key, try_suffixes=(".weight", ".bias")), array.copy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model


# --- references -----------------------------------------------------------------------

#: how many tokens the drafter tests generate after :data:`REPETITIVE_PROMPT`
NEW_TOKENS = 40


def hf_generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor | Sequence[int],
    max_new_tokens: int,
    eos_token_id: int | None = None,
) -> list[int]:
    """New tokens of transformers' own greedy ``generate`` (EOS off unless given)."""
    ids = torch.as_tensor(input_ids, dtype=torch.long).reshape(1, -1)
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_token_id,
            pad_token_id=PAD_TOKEN_ID,
        )
    return out[0, ids.shape[1] :].tolist()


#: a real result row (the default CPU run's first): rows built from it pass the schema check of merge and compare
DEFAULT_RUN_ROW = json.loads((Path(__file__).resolve().parents[1] / "docs" / "default_run.json").read_text())[
    "results"
][0]


def case_result(**fields: Any) -> CaseResult:
    """A schema-valid typed result: the committed default run's first row with ``fields`` changed."""
    return CaseResult.from_row({**DEFAULT_RUN_ROW, **fields})


def gated_case(
    case: str, *, acceptance: float, drafted: int, speedup: float, verdict: str = "lossless", **fields: Any
) -> CaseResult:
    """A typed row as the gate reads it: pair, k and prompt from ``case`` (``pair-kK-prompt``), the accepted
    tokens from ``acceptance`` of ``drafted``, ``speedup`` end to end and in decoding; a row that is not lossless
    diverged at token 5."""
    pair, k, prompt = case.split("-", 2)
    return case_result(
        case=case,
        pair=pair,
        k=int(k[1:]),
        prompt=prompt,
        acceptance_rate=acceptance,
        accepted_tokens=round(acceptance * drafted),
        drafted_tokens=drafted,
        lossless=verdict == "lossless",
        verdict=verdict,
        first_divergence=None if verdict == "lossless" else 5,
        speedup=speedup,
        decode_speedup=speedup,
        **fields,
    )


def run_document(cases: Sequence[str], **options: str | None) -> dict:
    """A run's JSON holding one schema-valid row per case id (``pair-kK-prompt``); ``options`` as it records
    them (an option left out, a flag not given, by leaving its key out: ``None`` here)."""
    rows = [
        {
            **DEFAULT_RUN_ROW,
            "case": case,
            "pair": case.split("-")[0],
            "acceptance_rate": 0.5,
            "decode_speedup": 1.0,
            "decode_speedup_ci_low": 0.9,
            "decode_speedup_ci_high": 1.1,
        }
        for case in cases
    ]
    recorded = {key: value for key, value in options.items() if value is not None}
    return {"options": {"specbench_k": "1,4", "specbench_max_new_tokens": "32", **recorded}, "results": rows}


@torch.inference_mode()
def top2_margins(model: PreTrainedModel, sequence: Sequence[int], prompt_length: int) -> torch.Tensor:
    """Top-1 minus top-2 logit at every position that predicted a generated token."""
    ids = torch.as_tensor(list(sequence), dtype=torch.long).unsqueeze(0)
    logits = model(input_ids=ids).logits[0, prompt_length - 1 : -1]
    top = logits.topk(2, dim=-1).values
    return top[:, 0] - top[:, 1]


def same_logits(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    """Whether ``a`` and ``b`` give the same logits (to 1e-5) on 16 ids of ``a``'s vocabulary."""
    ids = torch.arange(3, 19).remainder(a.config.vocab_size).unsqueeze(0)
    with torch.no_grad():
        return torch.allclose(a(input_ids=ids).logits, b(input_ids=ids).logits, atol=1e-5)


def benchmark_script(name: str) -> ModuleType:
    """The script ``benchmarks/<name>.py`` imported as a module (benchmarks/ is no package)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """The block on ``count`` torch threads, the count before it restored after it, even after an error."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
