"""Weights moved into 2 MB pages: the same values, ties kept, and a reason where the system gives no such pages."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pytest_specbench.models import weight_pages
from pytest_specbench.models.loading import load_model
from pytest_specbench.testing.tiny_models import tiny_model


def _tied_model() -> torch.nn.Module:
    model = tiny_model("gemma3")
    model.lm_head.weight = model.model.embed_tokens.weight
    model.model.embed_tokens.weight.data = torch.randn(4096, model.config.hidden_size)  # under 2 MB: stays
    model.register_buffer("big", torch.arange(1 << 20, dtype=torch.float32))  # 4 MiB: moves
    return model.eval()


@pytest.mark.skipif(weight_pages._setting() not in ("always", "madvise"), reason="no transparent huge pages here")
def test_weights_move_into_2mb_aligned_mappings_with_the_same_values() -> None:
    model = _tied_model()
    ids = torch.arange(3, 12).unsqueeze(0)
    expected = model(input_ids=ids).logits
    big = model.big.clone()
    report = weight_pages.into_huge_pages(model)
    assert report.reason is None and report.moved_bytes == 4 << 20
    assert model.big.data_ptr() % weight_pages.HUGE_PAGE == 0
    assert torch.equal(model.big, big)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert torch.equal(model(input_ids=ids).logits, expected)
    assert weight_pages.pages_of(model).startswith("2 MB pages")


def test_tied_weights_large_enough_to_move_stay_one_tensor() -> None:
    model = _tied_model()
    model.model.embed_tokens.weight.data = torch.randn(22000, model.config.hidden_size)  # over 2 MB, the head's too
    report = weight_pages.into_huge_pages(model)
    if report.reason is None:  # the buffer and the one shared weight, not the weight twice
        assert report.moved_bytes == (4 << 20) + 22000 * model.config.hidden_size * 4
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_without_transparent_huge_pages_the_weights_keep_small_pages_and_the_reason_is_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    setting = tmp_path / "enabled"
    setting.write_text("always madvise [never]\n")
    monkeypatch.setattr(weight_pages, "_SETTING", setting)
    model = _tied_model()
    values = model.big.clone()
    report = weight_pages.into_huge_pages(model)
    assert report.moved_bytes == 0 and torch.equal(model.big, values)  # copied into memory of its own, not moved
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert weight_pages.pages_of(model) == f"4 KB pages: transparent huge pages are never on this system ({setting})"


def test_no_tensor_stays_in_the_checkpoints_file_mapping(tmp_path: Path) -> None:
    """A float32 checkpoint loads as views of its file: every tensor leaves it, small ones too (one left there
    would keep the whole file mapped and resident)."""
    from safetensors.torch import load_file, save_file

    model = _tied_model()
    save_file(
        {name: tensor.contiguous() for name, tensor in model.state_dict().items() if "lm_head" not in name},
        tmp_path / "weights.safetensors",
    )
    mapped = load_file(tmp_path / "weights.safetensors")
    model.load_state_dict(mapped, strict=False, assign=True)
    model.lm_head.weight = model.model.embed_tokens.weight
    storages = {tensor.untyped_storage().data_ptr() for tensor in mapped.values()}
    weight_pages.into_huge_pages(model)
    left = [
        name
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]
        if tensor.untyped_storage().data_ptr() in storages
    ]
    assert left == []
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_a_model_never_asked_has_no_pages_to_report() -> None:
    assert weight_pages.pages_of(tiny_model("gemma3")) == ""


def test_load_model_moves_a_cpu_models_weights(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    folder = tmp_path / "model"
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=256, n_head=4, vocab_size=4096)).save_pretrained(folder)
    tokenizer = Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>"))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(folder)
    loaded = load_model(str(folder))
    assert weight_pages.pages_of(loaded.model) != ""
