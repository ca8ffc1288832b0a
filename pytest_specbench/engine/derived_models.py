"""Draft models derived from the target itself.

* :func:`truncated_copy` keeps the first few transformer blocks (plus the
  embeddings, final norm and LM head): a "layer-skip" draft that shares the
  target's tokenizer by construction.
* :func:`int8_copy` is a low-precision copy: dynamic int8 on CPU, a 16-bit
  copy on accelerators.

Both return new modules; the target is left as it was.
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn
from transformers import PreTrainedModel

__all__ = ["UnsupportedArchitecture", "int8_copy", "transformer_layers", "truncated_copy"]

# Attribute paths of the decoder-block list, per architecture family.
_LAYER_PATHS = (
    "model.layers",  # Llama, Mistral, Gemma 1-3, Qwen, Phi-3
    "model.language_model.layers",  # Gemma 3 multimodal (text tower)
    "transformer.h",  # GPT-2, GPT-J, Bloom, Falcon
    "gpt_neox.layers",  # GPT-NeoX, Pythia
    "model.decoder.layers",  # OPT
)


class UnsupportedArchitecture(ValueError):
    """The model's decoder blocks or layer-count setting could not be located."""


def _get_attr_path(root: nn.Module, path: str) -> object | None:
    node: object = root
    for part in path.split("."):
        node = getattr(node, part, None)
        if node is None:
            return None
    return node


def transformer_layers(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """The attribute path and the ``ModuleList`` of ``model``'s decoder blocks."""
    for path in _LAYER_PATHS:
        layers = _get_attr_path(model, path)
        if isinstance(layers, nn.ModuleList):
            return path, layers
    raise UnsupportedArchitecture(
        f"cannot find the decoder blocks of {type(model).__name__}: none of {', '.join(_LAYER_PATHS)} "
        "is a ModuleList (supported: GPT-2, Llama/Mistral/Gemma/Qwen-style, GPT-NeoX, OPT)"
    )


def _set_attr_path(root: nn.Module, path: str, value: nn.Module) -> None:
    parent_path, _, name = path.rpartition(".")
    parent = _get_attr_path(root, parent_path) if parent_path else root
    setattr(parent, name, value)


def _set_layer_count(config, num_layers: int) -> None:
    """Shrink the text config to ``num_layers`` blocks, per-layer lists included."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    # num_hidden_layers is canonical; GPT-2's n_layer is reached through attribute_map.
    if not hasattr(text, "num_hidden_layers"):
        raise UnsupportedArchitecture(f"{type(text).__name__} has no num_hidden_layers setting")
    text.num_hidden_layers = num_layers
    # Gemma 2/3, Qwen 2+, ...: one entry per layer; the KV cache is laid out from it.
    layer_types = getattr(text, "layer_types", None)
    if isinstance(layer_types, (list, tuple)):
        text.layer_types = list(layer_types[:num_layers])


def truncated_copy(model: PreTrainedModel, num_layers: int) -> PreTrainedModel:
    """A copy of ``model`` with only its first ``num_layers`` decoder blocks.

    The copy has the same class, device and dtype, and its own copies of the
    embeddings, the first ``num_layers`` blocks, the final norm and the LM
    head; its config says ``num_layers`` layers (``layer_types`` cut to
    match), so KV caches built from it have the right layout. Works for
    GPT-2, Llama/Mistral/Gemma/Qwen-style, GPT-NeoX and OPT models; raises
    :class:`UnsupportedArchitecture` for others.
    """
    path, layers = transformer_layers(model)
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or not 1 <= num_layers <= len(layers):
        raise ValueError(f"num_layers must be an integer in [1, {len(layers)}], got {num_layers!r}")
    # Swap a short list in while copying, so the dropped blocks are never
    # duplicated (a full deepcopy of a large target would double its memory).
    _set_attr_path(model, path, nn.ModuleList(list(layers)[:num_layers]))
    try:
        draft = copy.deepcopy(model)
    finally:
        _set_attr_path(model, path, layers)
    _set_layer_count(draft.config, num_layers)
    draft.eval()
    return draft


# --- low precision ---------------------------------------------------------------


def _conv1d_to_linear(model: nn.Module) -> None:
    """Replace GPT-2's ``Conv1D`` blocks by equivalent ``nn.Linear`` in place.

    Conv1D is a linear layer with a transposed weight; quantize_dynamic only
    knows nn.Linear, so without this a GPT-2 would keep all its blocks in float.
    """
    from transformers.pytorch_utils import Conv1D

    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, Conv1D):
                in_features, out_features = child.weight.shape
                linear = nn.Linear(in_features, out_features, bias=child.bias is not None)
                linear.to(device=child.weight.device, dtype=child.weight.dtype)
                with torch.no_grad():
                    linear.weight.copy_(child.weight.t())
                    if child.bias is not None:
                        linear.bias.copy_(child.bias)
                setattr(module, child_name, linear)


class Int8WeightOnlyLinear(nn.Module):
    """Fallback int8 linear: per-output-channel int8 weights, dequantised per call.

    Used only where ``torch.ao.quantization.quantize_dynamic`` is gone; it
    saves memory but not time (no int8 matmul kernel without extra packages).
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
        self.register_buffer("qweight", torch.round(weight / scale).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().clone())
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = (self.qweight.float() * self.scale).to(x.dtype)
        return nn.functional.linear(x, weight, None if self.bias is None else self.bias.to(x.dtype))


def _weight_only_int8_(model: nn.Module) -> None:
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, child_name, Int8WeightOnlyLinear(child))


def _placeholder_free_linear() -> type[nn.Module]:
    """torch's dynamic int8 linear, converted as torch converts it (the same observer, quantised weight and
    packing), less the zero weight of the layer's own shape that its constructor quantises and packs first: for
    Gemma 3's 262,144-row output head that placeholder held 0.25 GiB for a second, the run's peak memory."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
    from torch.ao.nn.quantized.modules.utils import _quantize_weight
    from torch.ao.quantization.qconfig import default_dynamic_qconfig

    class PlaceholderFreeLinear(DynamicLinear):
        @classmethod
        def from_float(cls, mod: nn.Module, use_precomputed_fake_quant: bool = False) -> nn.Module:
            qconfig = getattr(mod, "qconfig", None) or default_dynamic_qconfig
            observer = qconfig.weight()
            observer(mod.weight)
            quantised = cls(1, 1, dtype=torch.qint8)  # a one-weight placeholder, replaced at once
            quantised.set_weight_bias(_quantize_weight(mod.weight.float(), observer), mod.bias)
            quantised.in_features, quantised.out_features = mod.in_features, mod.out_features
            return quantised

    return PlaceholderFreeLinear


def _dynamic_int8(model: PreTrainedModel) -> nn.Module:
    # The copy takes the target's float32 parameters as they are, not copies: quantisation gives the linear layers
    # int8 weights of their own, and what stays float (embeddings, norms) is only read; a copy would hold the
    # target's weights twice. Another dtype's parameters are copied to float32 (the int8 kernels take float32).
    memo = {
        id(parameter): parameter
        if parameter.dtype == torch.float32
        else nn.Parameter(parameter.detach().float(), requires_grad=False)
        for parameter in model.parameters()
    }
    draft = copy.deepcopy(model, memo).float()  # float buffers too: the dynamic int8 kernels take float32
    _conv1d_to_linear(draft)
    quantize_dynamic = getattr(getattr(torch, "ao", None), "quantization", None)
    quantize_dynamic = getattr(quantize_dynamic, "quantize_dynamic", None)
    if quantize_dynamic is None:
        _weight_only_int8_(draft)
    else:
        with warnings.catch_warnings():
            # torch.ao.quantization is deprecated in favour of torchao, but still
            # ships (and works) in torch 2.13; the fallback above covers its removal.
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", UserWarning)
            mapping = {nn.Linear: _placeholder_free_linear()}
            quantize_dynamic(draft, {nn.Linear}, dtype=torch.qint8, mapping=mapping, inplace=True)
    return draft.eval()


def int8_copy(model: PreTrainedModel) -> nn.Module:
    """A low-precision copy of ``model`` for drafting, chosen by its device; still a ``PreTrainedModel`` of the same
    class, so it drafts through :class:`~pytest_specbench.engine.drafters.ModelDrafter`.

    * CPU: dynamic int8 quantisation of every ``nn.Linear`` (GPT-2's ``Conv1D`` converted first); embeddings and
      norms stay float32. Without ``quantize_dynamic`` in torch, weight-only :class:`Int8WeightOnlyLinear`.
    * Accelerators (int8 dynamic kernels are CPU-only): **bfloat16** where natively supported (not emulated, as
      torch counts it on pre-Ampere GPUs), else **float16**; when the target already runs in that dtype, the other.
    """
    device = model.device
    if device.type == "cpu":
        return _dynamic_int8(model)
    half = torch.float16
    if device.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False):
        half = torch.bfloat16
    if model.dtype == half:
        # A copy in the target's own dtype would be the target itself; take the other half type.
        half = torch.float16 if half == torch.bfloat16 else torch.bfloat16
    return copy.deepcopy(model).to(dtype=half).eval()
