"""transformers' ``generate`` with nothing left for it to guess: the reference every verdict rests on.

Two guesses of transformers 5 would change the output:
- without an ``attention_mask`` it infers one from the pad id and masks every prompt token equal to it
  (id 0 is "!" in GPT-2, Qwen2.5 and Llama-3, and the first byte of a byte-level vocabulary);
- every ``None`` of a passed generation config is filled from the model's own, so "no EOS" comes back as
  the model's EOS and a cleared knob (a checkpoint's repetition penalty) comes back too.

So the mask is always passed, and for the call the model's own generation config is the plain one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import GenerationConfig, PreTrainedModel

from .sampling import SamplingParams

__all__ = ["own_pad_token_id", "plain_generation_config", "plain_generate", "generation_config_as"]

# Knobs that change which token is chosen; the plain config sets them to transformers' neutral defaults.
_CHOICE_KNOBS_UNSET = ("min_p", "min_new_tokens", "sequence_bias", "guidance_scale", "watermarking_config")


def _first_id(value: object) -> int | None:
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def own_pad_token_id(model: PreTrainedModel) -> int | None:
    """The model's own pad id (generation config, then model config), else its own EOS, else None.

    Never a made-up id such as 0: that is a real token of most vocabularies.
    """
    configs = (model.generation_config, model.config)
    for name in ("pad_token_id", "eos_token_id"):
        for config in configs:
            found = _first_id(getattr(config, name, None))
            if found is not None:
                return found
    return None


def plain_generation_config(
    model: PreTrainedModel, max_new_tokens: int, eos_token_id: int | None, sampling: SamplingParams | None = None
) -> GenerationConfig:
    """The model's generation config for exactly ``max_new_tokens`` (or to ``eos_token_id``): greedy, or
    sampled with ``sampling``'s temperature, top-p and top-k, and no other knob a checkpoint ships."""
    config = GenerationConfig.from_dict(model.generation_config.to_dict())
    neutral = GenerationConfig()._get_default_generation_params()
    for knob, value in neutral.items():
        if knob not in ("use_cache", "max_length") and not knob.startswith(("num_assistant", "assistant")):
            setattr(config, knob, value)
    for knob in _CHOICE_KNOBS_UNSET:
        setattr(config, knob, None)
    config.eos_token_id = eos_token_id
    config.max_new_tokens = max_new_tokens
    config.max_length = None
    config.pad_token_id = own_pad_token_id(model)
    if sampling is not None and not sampling.greedy:
        config.do_sample = True
        config.temperature, config.top_p, config.top_k = sampling.temperature, sampling.top_p, sampling.top_k
    return config


@contextmanager
def generation_config_as(model: PreTrainedModel, config: GenerationConfig) -> Iterator[None]:
    """``model.generation_config`` is ``config`` inside the block, so generate() fills no gap from elsewhere."""
    saved = model.generation_config
    model.generation_config = config
    try:
        yield
    finally:
        model.generation_config = saved


def plain_generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    config: GenerationConfig,
    **kwargs: Any,
) -> torch.Tensor:
    """``model.generate`` on ``input_ids`` with this mask and exactly this config; returns the sequences."""
    if attention_mask is None or attention_mask.shape != input_ids.shape:
        raise ValueError("plain_generate needs the attention mask of input_ids (all ones for an unpadded prompt)")
    with generation_config_as(model, config):
        return model.generate(input_ids, attention_mask=attention_mask, generation_config=config, **kwargs)
