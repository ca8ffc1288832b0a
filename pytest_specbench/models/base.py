"""Names and errors of the model layer that need no torch: safe to import at pytest start-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: dtype names every loader accepts
#: the embedded default model's loader name (kept here so the pair registry needs no torch)
GEMMA3_270M_NAME = "embedded:gemma3-270m"
#: the Qwen2.5-Coder models of the ``qwen`` extra (chunk packages, see :mod:`.qwen`), and what installs them
QWEN_CODER_1_5B_NAME = "embedded:qwen2.5-coder-1.5b"
QWEN_CODER_0_5B_NAME = "embedded:qwen2.5-coder-0.5b"
QWEN_HINT = "pip install -e '.[qwen]'"

DTYPE_NAMES: tuple[str, ...] = ("float32", "float16", "bfloat16")


class ModelUnavailable(Exception):
    """A model cannot be loaded here and now: not downloaded, package missing, ...

    ``model`` is the source as given, ``reason`` says what is missing and
    ``hint`` is the command that would fix it (None when there is none).
    """

    def __init__(self, model: str, reason: str, hint: str | None = None, *, hint_label: str = "fetch it with") -> None:
        self.model = model
        self.reason = reason
        self.hint = hint
        self.hint_label = hint_label
        super().__init__(model, reason, hint)

    def __str__(self) -> str:
        text = f"model {self.model!r} {self.reason}"
        return f"{text}; {self.hint_label}: {self.hint}" if self.hint else text


class UnrunnableCase(ValueError):
    """A case that cannot run as configured: models that do not fit together, a prompt longer than a
    context window. The message names what does not fit and what to change; no traceback is needed."""


class NotApplicable(Exception):
    """A case of the matrix that has no meaning for its pair (transformers' prompt lookup at k=auto): skipped
    with the reason, not failed."""


#: config attributes that hold a model's context window, in the order they are read (GPT-2's
#: config.json says n_positions, and its config answers to max_position_embeddings as well)
_CONTEXT_WINDOW_ATTRIBUTES = ("n_positions", "max_position_embeddings")


def context_window(config: Any) -> tuple[int, str] | None:
    """``(positions, attribute)``: the positions a model's config allows and where it says so; None if unstated."""
    for attribute in _CONTEXT_WINDOW_ATTRIBUTES:
        value = getattr(config, attribute, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, attribute
    return None


def converts_through_cache(source: str) -> bool:
    """Whether loading ``source`` needs the pytest-specbench cache: an embedded model is assembled there and a
    GGUF file converted there (with their locks); a checkpoint folder or a hub id only memoises hashes in it,
    best effort."""
    return source.startswith("embedded:") or Path(source).suffix == ".gguf"


def cache_dir_problem(cache_dir: Path) -> str | None:
    """Why ``cache_dir`` cannot serve as the cache, or None; creates it if missing, leaves no file.

    Unusable: a file, a folder that cannot be created, or an empty one that takes no new file (nothing cached,
    nothing can be). A read-only folder that holds something is accepted: its conversions may be the ones the
    run needs, read without writing; one that is missing then fails its case alone.
    """
    from ..atomic import unwritable_reason

    if cache_dir.exists() and not cache_dir.is_dir():
        return "it is a file, not a folder"
    problem = unwritable_reason(cache_dir / "probe", folder_name="the cache folder")
    if problem is None or not cache_dir.is_dir():
        return problem
    try:
        if any(cache_dir.iterdir()):
            return None
    except OSError as error:
        return f"{problem}, and it cannot be read ({error.strerror or error})"
    return f"{problem}, and it is empty, so it holds no converted model to read"
