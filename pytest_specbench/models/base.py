"""Names and errors of the model layer that need no torch: safe to import at pytest start-up."""

from __future__ import annotations

#: dtype names every loader accepts
#: the embedded default model's loader name (kept here so the pair registry needs no torch)
GEMMA3_270M_NAME = "embedded:gemma3-270m"

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
