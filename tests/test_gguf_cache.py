"""The GGUF conversion cache: convert a .gguf file once, then load the converted entry."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from factory import same_logits, write_tiny_gguf

from pytest_specbench.models import gguf_cache
from pytest_specbench.models.loading import load_model


def test_gguf_is_converted_once_then_loaded_from_the_cache(tmp_path, monkeypatch):
    original = write_tiny_gguf(tmp_path / "tiny.gguf")
    cache = tmp_path / "cache"
    first = load_model(str(tmp_path / "tiny.gguf"), cache_dir=cache)
    assert first.source == "gguf-converted"
    assert same_logits(original, first.model)
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
    assert same_logits(replacement, reloaded.model)
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
    assert same_logits(original, again.model)


def test_default_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_CACHE_DIR", str(tmp_path / "explicit"))
    assert gguf_cache.default_cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("SPECBENCH_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert gguf_cache.default_cache_dir() == tmp_path / "xdg" / "pytest-specbench"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert gguf_cache.default_cache_dir() == Path.home() / ".cache" / "pytest-specbench"
