"""The GGUF conversion cache: convert a .gguf file once, then load the converted entry."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
import torch
from factory import same_logits, write_tiny_gguf

from pytest_specbench.models import gguf_cache
from pytest_specbench.models.loading import load_model


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


# --- a cache that can be trusted and shared --------------------------------------------------------


def _converted_entry(tmp_path: Path):
    """Convert a tiny GGUF into a fresh cache; return (original model, cache, entry)."""
    original = write_tiny_gguf(tmp_path / "tiny.gguf")
    cache = tmp_path / "cache"
    assert load_model(str(tmp_path / "tiny.gguf"), cache_dir=cache).source == "gguf-converted"
    sha256 = gguf_cache.file_sha256(tmp_path / "tiny.gguf", cache_dir=cache)
    return original, cache, gguf_cache.cached_entry(sha256, cache_dir=cache)


def _flip_last_byte(path: Path) -> None:
    """Change the last byte (a weight, past the safetensors header): same size, other content."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.slow
def test_same_size_corruption_is_caught_and_the_entry_rebuilt(tmp_path):
    original, cache, entry = _converted_entry(tmp_path)
    _flip_last_byte(entry / "model.safetensors")
    again = load_model(str(tmp_path / "tiny.gguf"), cache_dir=cache)
    assert again.source == "gguf-converted"
    assert same_logits(original, again.model)


@pytest.mark.slow
def test_bit_rot_that_keeps_size_and_mtime_is_caught_by_the_next_days_hashing(tmp_path, monkeypatch):
    original, cache, entry = _converted_entry(tmp_path)
    weights = entry / "model.safetensors"
    before = weights.stat()
    _flip_last_byte(weights)
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))  # as a failing disk would leave it
    # Hashed today at conversion: today's loads check sizes and mtimes only (the documented trade-off).
    assert load_model(str(tmp_path / "tiny.gguf"), cache_dir=cache).source == "gguf-cache"
    monkeypatch.setattr(gguf_cache, "_today", lambda: "2999-01-01")
    again = load_model(str(tmp_path / "tiny.gguf"), cache_dir=cache)
    assert again.source == "gguf-converted"
    assert same_logits(original, again.model)


def test_hashes_are_checked_once_per_machine_and_day(tmp_path, monkeypatch):
    _, cache, entry = _converted_entry(tmp_path)
    hashed = []
    real = gguf_cache._sha256_of
    monkeypatch.setattr(gguf_cache, "_sha256_of", lambda path: hashed.append(path.name) or real(path))
    gguf_cache.verify_entry(entry, cache_dir=cache)
    assert hashed == []  # the conversion hashed the files today
    monkeypatch.setattr(gguf_cache, "_today", lambda: "2999-01-01")
    gguf_cache.verify_entry(entry, cache_dir=cache)
    assert "model.safetensors" in hashed
    hashed.clear()
    gguf_cache.verify_entry(entry, cache_dir=cache)
    assert hashed == []


@pytest.mark.slow
def test_entry_files_are_fsynced_before_the_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(descriptor):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{descriptor}")))
        real_fsync(descriptor)

    def replace(source, destination):
        events.append(("replace", str(source), str(destination)))
        real_replace(source, destination)

    monkeypatch.setattr(gguf_cache.os, "fsync", fsync)
    monkeypatch.setattr(gguf_cache.os, "replace", replace)
    _, _, entry = _converted_entry(tmp_path)
    renames = [event for event in events if event[0] == "replace" and event[2] == str(entry)]
    assert len(renames) == 1
    temporary = renames[0][1]
    synced = {path for kind, path, *_ in events[: events.index(renames[0])] if kind == "fsync"}
    for path in entry.iterdir():
        assert f"{temporary}/{path.name}" in synced, path.name
    assert temporary in synced  # the folder itself, so the files' names are durable too


def test_an_error_that_is_not_corruption_keeps_the_entry(tmp_path, monkeypatch):
    _, cache, entry = _converted_entry(tmp_path)

    def out_of_memory(entry, dtype):
        raise MemoryError("no room for the weights")

    def must_not_convert(*args, **kwargs):
        raise AssertionError("a good entry was converted again after an out-of-memory error")

    monkeypatch.setattr(gguf_cache, "_load_entry", out_of_memory)
    monkeypatch.setattr(gguf_cache, "convert_gguf", must_not_convert)
    with pytest.raises(MemoryError):
        load_model(str(tmp_path / "tiny.gguf"), cache_dir=cache)
    assert (entry / gguf_cache.ENTRY_MARKER).is_file()


@pytest.mark.parametrize(
    ("umask", "folder_mode", "file_mode"),
    [(0o002, 0o775, 0o664), (0o022, 0o755, 0o644)],
    ids=["umask-002", "umask-022"],
)
def test_entry_modes_follow_the_umask_so_a_group_can_share_the_cache(tmp_path, umask, folder_mode, file_mode):
    previous = os.umask(umask)
    try:
        _, cache, entry = _converted_entry(tmp_path)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(entry.stat().st_mode) == folder_mode
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in entry.iterdir()}
    assert modes == dict.fromkeys(modes, file_mode)
    assert "model.safetensors" in modes
