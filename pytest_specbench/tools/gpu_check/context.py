"""What the in-process checks share: the device, the form, the tiny models (built by the package's
test-support module, the same builders the test suite uses) and the shipped prompts."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from .plan import Form


class Context:
    """What the in-process checks share: the device, the form, and the tiny models built once."""

    def __init__(self, device: str, form: Form, with_gemma: bool) -> None:
        import torch

        self.device = device
        self.torch_device = torch.device(device)
        self.form = form
        self.cuda = self.torch_device.type == "cuda"
        self.with_gemma = with_gemma
        self.env: dict[str, Any] = {}
        self._tiny: tuple | None = None

    def tiny(self):
        """The float32 tiny Llama target and its noisy-copy draft, on the CPU (callers copy and move them)."""
        if self._tiny is None:
            from ...testing.tiny_models import tiny_pair

            self._tiny = tiny_pair("llama")
        return self._tiny

    def tiny_copies(self, dtype=None):
        """Copies of the tiny target and draft on the device, in ``dtype`` when given, in eval mode."""
        move = {"device": self.torch_device, **({"dtype": dtype} if dtype is not None else {})}
        return tuple(copy.deepcopy(model).to(**move).eval() for model in self.tiny())

    def repetitive_ids(self):
        """The drafter tests' repetitive prompt as a batch of one on the device."""
        import torch

        from ...testing.tiny_models import REPETITIVE_PROMPT

        return torch.tensor([REPETITIVE_PROMPT], device=self.torch_device)


#: the byte tokenizer's ids (257, end-of-text 256) for the tiny models on disk
BYTE_IDS = dict(vocab_size=257, pad_token_id=256, bos_token_id=256, eos_token_id=256, max_position_embeddings=4096)


def write_tiny_pairs(folder: Path) -> Path:
    """Byte-level tiny models on disk and a pairs TOML naming them (docs/pairs.md): ``tiny_llama`` (a noisy
    copy drafts), ``tiny_llama_int8``, ``tiny_llama_pld``, ``tiny_gemma_pld`` (sliding-window layers) and
    ``tiny_served_pld`` (a Llama in a shape vLLM serves)."""
    from ...testing.tiny_models import (
        DRAFT_NOISE,
        SERVED_LLAMA,
        byte_tokenizer,
        noisy_copy,
        save_checkpoint,
        tiny_model,
    )

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = byte_tokenizer()
    llama = tiny_model("llama", **{**BYTE_IDS, "pad_token_id": None})
    models = {
        "llama": llama,
        "llama_draft": noisy_copy(llama, DRAFT_NOISE, seed=102),
        "gemma": tiny_model("gemma3", **BYTE_IDS),
        "served": tiny_model("llama", **SERVED_LLAMA),
    }
    for name, model in models.items():
        model.generation_config.pad_token_id = BYTE_IDS["pad_token_id"]  # generate() pads with end-of-text
        save_checkpoint(model, tokenizer, folder / name)
    pairs = folder / "pairs.toml"
    pairs.write_text(
        "# written by python -m pytest_specbench gpu-check: random tiny models with a byte tokenizer\n"
        '[pairs.tiny_llama]\ntarget = "./llama"\ndraft = "./llama_draft"\n'
        'description = "tiny Llama, noisy copy drafts"\n\n'
        '[pairs.tiny_llama_int8]\ntarget = "./llama"\ndrafter = "int8"\n\n'
        '[pairs.tiny_llama_pld]\ntarget = "./llama"\ndrafter = "prompt_lookup"\n\n'
        '[pairs.tiny_gemma_pld]\ntarget = "./gemma"\ndrafter = "prompt_lookup"\n\n'
        '[pairs.tiny_served_pld]\ntarget = "./served"\ndrafter = "prompt_lookup"\n',
        encoding="utf-8",
    )
    return pairs


def shipped_prompt(category: str) -> str:
    """The text of the shipped suite's first prompt of ``category``."""
    from ...cases.prompts import load_prompts, select_prompts

    return select_prompts(load_prompts(), [category], per_category=1)[0].text
