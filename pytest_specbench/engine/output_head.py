"""The target's output head over a verify block, computed as ``weight @ hidden.T`` where that is faster.

A verify pass needs the vocabulary logits at every position of its block. On CPU, torch's ``linear`` over a few
rows of a large head can run far below memory speed where ``weight @ hidden.T`` does not (docs/engines.md, "The
verify pass's output head"; figures on its dated page). Both forms compute the same dot products; the last bits may
round differently, as between a one-row and a many-row pass, and the lossless check covers both. Which is faster
depends on the CPU, the BLAS and the shape, so ``kernel="auto"`` times both on the first call at each row count (2
or more: interleaved, median of 3 after a warm-up) and keeps the faster for that (head, row count) for the rest of
the process. ``"column"`` always takes ``weight @ hidden.T`` for multi-row calls, ``"linear"`` keeps the model's
own head. One-row calls always use the model's own ``linear``.
"""

from __future__ import annotations

import contextlib
import statistics
import weakref
from collections.abc import Iterator

import torch
from transformers import PreTrainedModel

from .names import HEAD_KERNELS
from .timing import DeviceClock

__all__ = ["HEAD_KERNELS", "column_head", "column_head_rows", "column_logits", "head_choices", "settle_head_forms"]

# head module -> {row count: True when weight @ hidden.T measured faster}
_choices: weakref.WeakKeyDictionary[torch.nn.Module, dict[int, bool]] = weakref.WeakKeyDictionary()


def column_logits(head: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    """``head(hidden)`` computed as ``weight @ hidden.T`` (contiguous, the shape ``head`` would give)."""
    rows = hidden.reshape(-1, hidden.shape[-1])
    logits = torch.mm(head.weight, rows.t()).t()
    if head.bias is not None:
        logits = logits + head.bias
    return logits.contiguous().reshape(*hidden.shape[:-1], logits.shape[-1])


def _column_is_faster(head: torch.nn.Linear, hidden: torch.Tensor, repeats: int = 3) -> bool:
    clock = DeviceClock(head.weight.device)
    forms = {
        "linear": lambda: torch.nn.functional.linear(hidden, head.weight, head.bias),
        "column": lambda: column_logits(head, hidden),
    }
    times: dict[str, list[float]] = {name: [] for name in forms}
    for repeat in range(repeats + 1):  # the first round warms up and is not kept
        for name, form in forms.items():
            start = clock.now()
            form()
            if repeat:
                times[name].append(clock.now() - start)
    return statistics.median(times["column"]) < statistics.median(times["linear"])


def head_choices(model: PreTrainedModel) -> dict[int, str]:
    """The forms measured so far for ``model``'s output head: row count -> ``"column"`` or ``"linear"``."""
    head = model.get_output_embeddings()
    table = _choices.get(head, {}) if head is not None else {}
    return {rows: "column" if column else "linear" for rows, column in sorted(table.items())}


def _patchable(head: torch.nn.Module | None) -> bool:
    # A forward already set on the instance (an enclosing block, or a wrapper such as accelerate's
    # hooks) owns the head: leave it alone.
    return type(head) is torch.nn.Linear and head.weight.is_floating_point() and "forward" not in vars(head)


def _check_kernel(kernel: str) -> None:
    if kernel not in HEAD_KERNELS:
        raise ValueError(f"head kernel must be one of {', '.join(HEAD_KERNELS)}, got {kernel!r}")


def column_head_rows(model: PreTrainedModel, kernel: str, max_rows: int) -> list[int]:
    """The row counts 2 .. ``max_rows`` whose head calls :func:`column_head` serves as ``weight @ hidden.T``
    (under ``auto``, those measured so far and found faster)."""
    _check_kernel(kernel)
    if kernel == "linear" or not _patchable(model.get_output_embeddings()):
        return []
    if kernel == "column":
        return list(range(2, max_rows + 1))
    return [rows for rows, form in head_choices(model).items() if form == "column" and rows <= max_rows]


@contextlib.contextmanager
def column_head(model: PreTrainedModel, kernel: str = "auto") -> Iterator[None]:
    """Within the block, multi-row calls of ``model``'s output head use the measured-faster form.

    A no-op for ``kernel="linear"``, for heads that are not a plain float ``torch.nn.Linear``
    (quantised heads, say), and inside an enclosing ``column_head`` of the same model.
    """
    _check_kernel(kernel)
    head = model.get_output_embeddings()
    if kernel == "linear" or not _patchable(head):
        yield
        return
    table = _choices.setdefault(head, {})
    linear = head.forward

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        rows = hidden.numel() // hidden.shape[-1]
        if rows < 2:
            return linear(hidden)
        if kernel == "column":
            return column_logits(head, hidden)
        if rows not in table:
            table[rows] = _column_is_faster(head, hidden)
        return column_logits(head, hidden) if table[rows] else linear(hidden)

    head.forward = forward
    try:
        yield
    finally:
        del head.forward


@torch.inference_mode()
def settle_head_forms(model: PreTrainedModel, max_rows: int, kernel: str = "auto") -> None:
    """Measure, under ``auto``, every row count 2 .. ``max_rows`` not measured yet, so that no later
    (timed) run measures one: a schedule's blocks can be longer than the cost probe's."""
    _check_kernel(kernel)
    head = model.get_output_embeddings()
    if kernel != "auto" or not _patchable(head):
        return
    table = _choices.setdefault(head, {})
    for rows in range(2, max_rows + 1):
        if rows not in table:
            hidden = torch.randn(1, rows, head.in_features, dtype=head.weight.dtype, device=head.weight.device)
            table[rows] = _column_is_faster(head, hidden)
