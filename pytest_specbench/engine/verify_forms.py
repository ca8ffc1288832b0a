"""The kernels of the native engine's target passes: every linear layer in its measured-fastest form.

A decode step reads every weight once; a verify pass reads the same weights for a few positions, so at
memory speed it costs about one step. torch's own kernels fall short of that on some CPUs (docs/engines.md,
"The verify pass's kernels"). Within :func:`verify_forms`, each plain ``torch.nn.Linear`` of the model runs
a call of up to 32 rows in one of three forms, all computing the same dot products (the last bits may round
differently, as a one-row and a many-row pass do; the lossless check covers every form):

- ``own``: the model's own ``linear``;
- ``rows``: the few-rows kernel (:mod:`.few_rows`; float32 and bfloat16 on CPU, 1 to 32 rows);
- ``column``: ``weight @ hidden.T`` (the output head only, :mod:`.output_head`).

``kernel="auto"`` uses, per (weight shape, dtype, row count), the form measured fastest by
:func:`settle_verify_forms`, before any timed run: each applicable form runs over every layer of that
shape (so weights come from memory, as in a pass), interleaved, median of 3 after a warm-up. A row
count not settled keeps ``own``. ``"rows"`` and ``"column"`` force their form where it applies,
``"linear"`` keeps the model's own kernels.

One-row calls settle and run exactly as multi-row calls do, so the greedy baseline's steps and the
speculative run's passes use the same kernels: a speedup then measures speculation, not a kernel.
"""

from __future__ import annotations

import contextlib
import statistics
import weakref
from collections.abc import Callable, Iterator

import torch
from transformers import PreTrainedModel

from . import few_rows
from .names import HEAD_KERNELS
from .output_head import column_logits
from .timing import DeviceClock

__all__ = [
    "HEAD_KERNELS",
    "column_head_rows",
    "few_rows_rows",
    "form_choices",
    "settle_verify_forms",
    "verify_forms",
]

OWN, ROWS, COLUMN = "own", "rows", "column"
#: forms a forced kernel uses where it applies
_FORCED = {"rows": ROWS, "column": COLUMN}
_REPEATS = 3

# (weight shape, dtype, is the head) of a layer group
_Group = tuple[tuple[int, ...], torch.dtype, bool]
# model -> {(group, row count): form}
_choices: weakref.WeakKeyDictionary[torch.nn.Module, dict[tuple[_Group, int], str]] = weakref.WeakKeyDictionary()


def _check_kernel(kernel: str) -> None:
    if kernel not in HEAD_KERNELS:
        raise ValueError(f"verify kernel must be one of {', '.join(HEAD_KERNELS)}, got {kernel!r}")


def _patchable(module: torch.nn.Module | None) -> bool:
    # A forward already set on the instance (an enclosing block, or a wrapper such as accelerate's
    # hooks) owns the layer: leave it alone.
    return type(module) is torch.nn.Linear and module.weight.is_floating_point() and "forward" not in vars(module)


def _layers(model: PreTrainedModel) -> dict[_Group, list[torch.nn.Linear]]:
    """The model's patchable linear layers, grouped by (weight shape, dtype, is the head)."""
    head = model.get_output_embeddings()
    groups: dict[_Group, list[torch.nn.Linear]] = {}
    for module in dict.fromkeys(model.modules()):
        if _patchable(module):
            key = (tuple(module.weight.shape), module.weight.dtype, module is head)
            groups.setdefault(key, []).append(module)
    return groups


def _applicable(group: _Group, layer: torch.nn.Linear, rows: int) -> list[str]:
    forms = [OWN]
    if few_rows.supports(layer, rows) and few_rows.kernel() is not None:
        forms.append(ROWS)
    if group[2]:
        forms.append(COLUMN)
    return forms


def _call(form: str, layer: torch.nn.Linear, hidden: torch.Tensor, own: Callable) -> torch.Tensor:
    if form == ROWS:
        return few_rows.few_rows_linear(layer, hidden)
    if form == COLUMN:
        return column_logits(layer, hidden)
    return own(hidden)


def _fastest(layers: list[torch.nn.Linear], forms: list[str], rows: int) -> str:
    """The form whose pass over every layer of the group is fastest (median of interleaved repeats)."""
    if len(forms) == 1:
        return forms[0]
    first = layers[0].weight
    hidden = torch.randn(1, rows, first.shape[1], dtype=first.dtype, device=first.device)
    clock = DeviceClock(first.device)
    times: dict[str, list[float]] = {form: [] for form in forms}
    for repeat in range(_REPEATS + 1):  # the first round warms up and is not kept
        for form in forms[repeat % len(forms) :] + forms[: repeat % len(forms)]:
            start = clock.now()
            for layer in layers:
                _call(form, layer, hidden, layer.forward)
            if repeat:
                times[form].append(clock.now() - start)
    return min(forms, key=lambda form: statistics.median(times[form]))


@torch.inference_mode()
def settle_verify_forms(model: PreTrainedModel, max_rows: int, kernel: str = "auto") -> None:
    """Under ``auto``, measure every (layer group, row count 1 .. ``max_rows``) not measured yet, so that no
    timed run measures one."""
    _check_kernel(kernel)
    if kernel != "auto":
        return
    table = _choices.setdefault(model, {})
    for group, layers in _layers(model).items():
        for rows in range(1, max_rows + 1):
            if (group, rows) not in table:
                table[group, rows] = _fastest(layers, _applicable(group, layers[0], rows), rows)


def _form(kernel: str, table: dict, group: _Group, layer: torch.nn.Linear, rows: int) -> str:
    if kernel == "auto":
        return table.get((group, rows), OWN)
    forced = _FORCED.get(kernel, OWN)
    return forced if forced in _applicable(group, layer, rows) else OWN


def form_choices(model: PreTrainedModel, kernel: str = "auto", max_rows: int = few_rows.MAX_ROWS + 1) -> dict:
    """``{(weight shape, dtype name, is the head): {row count: form}}`` for row counts 1 .. ``max_rows``."""
    _check_kernel(kernel)
    table = _choices.get(model, {})
    return {
        (group[0], str(group[1]).removeprefix("torch."), group[2]): {
            rows: _form(kernel, table, group, layers[0], rows) for rows in range(1, max_rows + 1)
        }
        for group, layers in _layers(model).items()
    }


def _rows_using(model: PreTrainedModel, kernel: str, max_rows: int, form: str, head_only: bool) -> list[int]:
    chosen = form_choices(model, kernel, max_rows) if kernel != "linear" else {}
    return sorted(
        {rows for group, forms in chosen.items() if group[2] or not head_only for rows, f in forms.items() if f == form}
    )


def column_head_rows(model: PreTrainedModel, kernel: str, max_rows: int) -> list[int]:
    """The row counts 1 .. ``max_rows`` whose output head runs as ``weight @ hidden.T``."""
    return _rows_using(model, kernel, max_rows, COLUMN, head_only=True)


def few_rows_rows(model: PreTrainedModel, kernel: str, max_rows: int) -> list[int]:
    """The row counts 1 .. ``max_rows`` at which some linear layer runs the few-rows kernel."""
    return _rows_using(model, kernel, max_rows, ROWS, head_only=False)


def _patched_forward(layer: torch.nn.Linear, group: _Group, kernel: str, table: dict) -> Callable:
    own = layer.forward
    # A forced kernel's forms are fixed now, so that a compiled step traces a lookup, not the kernel's build.
    forced = (
        {}
        if kernel == "auto"
        else {rows: _form(kernel, table, group, layer, rows) for rows in range(1, few_rows.MAX_ROWS + 1)}
    )

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        rows = hidden.numel() // hidden.shape[-1]
        form = table.get((group, rows), OWN) if kernel == "auto" else forced.get(rows, OWN)
        return _call(form, layer, hidden, own)

    return forward


@contextlib.contextmanager
def verify_forms(model: PreTrainedModel, kernel: str = "auto") -> Iterator[None]:
    """Within the block, calls of ``model``'s linear layers use the kernel's forms (see above).

    Leaves alone layers that are not a plain float ``torch.nn.Linear`` (quantised ones, say), and every
    layer inside an enclosing ``verify_forms`` of the same model.
    """
    _check_kernel(kernel)
    patched: dict[torch.nn.Linear, Callable] = {}
    if kernel != "linear":
        table = _choices.setdefault(model, {})
        for group, layers in _layers(model).items():
            for layer in layers:
                patched[layer] = layer.forward = _patched_forward(layer, group, kernel, table)
    try:
        yield
    finally:
        for layer in patched:
            vars(layer).pop("forward", None)
