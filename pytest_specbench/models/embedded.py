"""Embedded models: GGUF checkpoints shipped as chunk packages, so runs need no hub.

The default is Gemma 3 270M (Q4_K_M, the ``embedded`` extra, :mod:`.gemma`); the ``qwen`` extra adds
Qwen2.5-Coder 1.5B and 0.5B Instruct (:mod:`.qwen`). No such package is imported: :mod:`.chunks` finds each chunk
through its file list, checks it against this project's records and joins it once into the cache. The Gemma
weights are under the Gemma Terms of Use, which its package ships (``GEMMA3_270M.terms_path()``). See
docs/pairs.md, "The embedded model", and docs/qwen.md.
"""

from __future__ import annotations

from .chunks import ChunkedGGUF
from .gemma import GEMMA3_270M
from .qwen import QWEN_MODELS

__all__ = ["EMBEDDED_MODELS", "GEMMA3_270M"]

#: every embedded model, by the name ``load_model`` accepts
EMBEDDED_MODELS: dict[str, ChunkedGGUF] = {GEMMA3_270M.name: GEMMA3_270M, **QWEN_MODELS}
