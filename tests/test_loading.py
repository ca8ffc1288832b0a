"""Model loading: local checkpoints and the Hugging Face hub cache, offline.

Everything is built in-process by the tests' factory (tiny models and
tokenizers, a tiny GGUF file); nothing is downloaded.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from factory import hub_snapshot, same_logits, save_checkpoint, word_gpt2, word_tokenizer, write_tiny_gguf
from huggingface_hub import constants as hub_constants

from pytest_specbench.models.loading import (
    LoadedModel,
    ModelUnavailable,
    hub_cache_dir,
    load_model,
    model_available,
    resolve_dtype,
)


def save_word_checkpoint(folder: Path, seed: int = 0):
    """Save :func:`factory.word_gpt2` with its word tokenizer in ``folder``; return the model."""
    model = word_gpt2(seed)
    save_checkpoint(model, word_tokenizer(), folder)
    return model


@pytest.fixture
def empty_hf_home(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face home; returns its hub cache folder."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    return tmp_path / "hf" / "hub"


@pytest.fixture
def offline_hub(empty_hf_home, monkeypatch) -> Path:
    """An empty Hugging Face home with the hub switched off."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return empty_hf_home


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


@pytest.mark.slow
def test_load_local_directory(tmp_path):
    original = save_word_checkpoint(tmp_path / "ckpt")
    loaded = load_model(str(tmp_path / "ckpt"))
    assert isinstance(loaded, LoadedModel)
    assert loaded.source == "local"
    assert loaded.name == str(tmp_path / "ckpt")
    assert loaded.load_time_s > 0
    assert not loaded.model.training
    assert loaded.model.dtype == torch.float32
    assert loaded.model.device.type == "cpu"
    assert loaded.tokenizer.encode("w5 w6", add_special_tokens=False) == [5, 6]
    assert same_logits(original, loaded.model)


def test_load_local_directory_in_bfloat16(tmp_path):
    save_word_checkpoint(tmp_path / "ckpt")
    assert load_model(str(tmp_path / "ckpt"), dtype="bfloat16").model.dtype == torch.bfloat16


def test_missing_or_incomplete_local_paths_are_unavailable(tmp_path):
    assert "does not exist" in model_available(str(tmp_path / "nope"))
    with pytest.raises(ModelUnavailable, match="does not exist"):
        load_model(str(tmp_path / "nope"))
    with pytest.raises(ModelUnavailable, match="does not exist"):
        load_model("./no/such/model.gguf")
    (tmp_path / "empty").mkdir()
    assert "no config.json" in model_available(str(tmp_path / "empty"))
    save_word_checkpoint(tmp_path / "ckpt")
    assert model_available(str(tmp_path / "ckpt")) is None
    (tmp_path / "ckpt" / "model.safetensors").unlink()
    assert "no weights" in model_available(str(tmp_path / "ckpt"))


def test_gguf_and_other_files(tmp_path):
    write_tiny_gguf(tmp_path / "tiny.gguf")
    assert model_available(str(tmp_path / "tiny.gguf"), cache_dir=tmp_path / "cache") is None
    (tmp_path / "weights.bin").write_bytes(b"0")
    assert "not a .gguf checkpoint" in model_available(str(tmp_path / "weights.bin"))


def test_revision_is_for_hub_ids_only(tmp_path):
    save_word_checkpoint(tmp_path / "ckpt")
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


def test_hub_id_missing_and_hub_unreachable_fails_fast(empty_hf_home, monkeypatch):
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


def test_hub_id_loads_from_the_local_cache_offline(offline_hub):
    assert hub_cache_dir() == offline_hub
    original = save_word_checkpoint(hub_snapshot(offline_hub, "tiny/gpt2"))
    assert model_available("tiny/gpt2") is None
    loaded = load_model("tiny/gpt2")
    assert loaded.source == "hub-cache"
    assert same_logits(original, loaded.model)


def test_partly_cached_hub_snapshot_is_unavailable(offline_hub):
    snapshot = hub_snapshot(offline_hub, "tiny/partial")
    save_word_checkpoint(snapshot)
    (snapshot / "model.safetensors").unlink()
    with pytest.raises(ModelUnavailable, match="partly in the local Hugging Face cache"):
        load_model("tiny/partial")
