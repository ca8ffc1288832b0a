"""The kernels of the native engine's target passes: every linear layer in its measured-fastest form.

A decode step reads every weight once; a verify pass reads the same weights for a few positions, so at
memory speed it costs about one step. torch's own kernels fall short of that on some CPUs (docs/engines.md,
"The verify pass's kernels"). Within :meth:`KernelForms.applied`, each plain ``torch.nn.Linear`` of the model
runs a call of up to 32 rows in one of five forms, all computing the same dot products (the last bits may
round differently, as a one-row and a many-row pass do; the lossless check covers every form):

- ``own``: the model's own ``linear``;
- ``rows``: the few-rows kernel (:mod:`.few_rows`; float32 and bfloat16 on CPU, 1 to 32 rows);
- ``rows_held``: the same kernel holding each vector of x in a register (float32, 2 rows or more: same results,
  faster in cache, slower on some shapes streamed from memory);
- ``rows_tiles``: the same kernel multiplying in AMX tiles (bfloat16, 1 to 16 rows, on CPUs with AMX);
- ``column``: ``weight @ hidden.T`` (the output head only, :mod:`.output_head`).

A :class:`KernelForms` is one model's forms under one kernel setting (``--specbench-kernels``, :data:`.names.KERNELS`),
an object its model's owner keeps (the measure layer's model store keeps one per loaded target; a library caller
may pass one to :func:`~.decoding.greedy_generate` and :func:`~.decoding.speculative_generate`, or a setting's
name for forms of that call alone). It holds its choices; nothing is kept at module level, so settling one model
never changes another's forms. ``"auto"`` uses, per (weight shape, dtype, row count), the form measured fastest by
:meth:`KernelForms.settle`, before any timed run: each applicable form runs over every layer of that shape (so
weights come from memory, as in a pass), interleaved, median of 3 after a warm-up, once per machine: the choice is
kept (:mod:`.settled_forms`), so every later run computes the same bits. A row count not settled keeps ``own``.
``"rows"`` and ``"column"`` force their form where it applies, ``"linear"`` keeps the model's own kernels.

One-row calls settle and run exactly as multi-row calls do, so the greedy baseline's steps and the
speculative run's passes use the same kernels: a speedup then measures speculation, not a kernel.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import statistics
from collections.abc import Callable, Iterator

import torch

from . import few_rows
from .names import KERNELS
from .output_head import column_logits
from .settled_forms import settled, settled_path
from .timing import DeviceClock

__all__ = ["KERNELS", "KernelForms", "draft_kernel_forms", "kernel_forms"]

OWN, ROWS, HELD, TILES, COLUMN = "own", "rows", "rows_held", "rows_tiles", "column"
#: the few-rows kernel's forms, and the variant of the kernel each runs
_VARIANTS = {ROWS: "rows", HELD: "held", TILES: "tiles"}
AUTO, LINEAR = "auto", "linear"
#: forms a forced kernel uses where it applies
_FORCED = {"rows": ROWS, "column": COLUMN}
_REPEATS = 3

# (weight shape, dtype, is the head) of a layer group
_Group = tuple[tuple[int, ...], torch.dtype, bool]


def _check_kernel(kernel: str) -> None:
    if kernel not in KERNELS:
        raise ValueError(f"kernel setting must be one of {', '.join(KERNELS)}, got {kernel!r}")


def _patchable(module: torch.nn.Module | None) -> bool:
    # A forward already set on the instance (an enclosing block, or a wrapper such as accelerate's
    # hooks) owns the layer: leave it alone.
    return type(module) is torch.nn.Linear and module.weight.is_floating_point() and "forward" not in vars(module)


def _linear_like(module: torch.nn.Module) -> bool:
    # A layer that computes linear in some other form: a quantised copy's, a wrapper's (not its packed weights).
    name = type(module).__name__
    return "Linear" in name and "Packed" not in name and not _patchable(module)


def _layers(model: torch.nn.Module) -> dict[_Group, list[torch.nn.Linear]]:
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
        if few_rows.supports(layer, rows, "held") and rows >= 2:
            forms.append(HELD)
        if few_rows.supports(layer, rows, "tiles"):
            forms.append(TILES)
    if group[2]:
        forms.append(COLUMN)
    return forms


def _call(form: str, layer: torch.nn.Linear, hidden: torch.Tensor, own: Callable) -> torch.Tensor:
    if form in _VARIANTS:
        return few_rows.few_rows_linear(layer, hidden, _VARIANTS[form])
    if form == COLUMN:
        return column_logits(layer, hidden)
    return own(hidden)


def _settled_key(group: _Group, rows: int) -> str:
    """``"896x4864 bfloat16 layer, 1 row"``: a (layer group, row count) as the machine's file keeps it."""
    shape, dtype, head = group
    return f"{'x'.join(map(str, shape))} {str(dtype).removeprefix('torch.')} {'head' if head else 'layer'}, {rows} row"


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


class KernelForms:
    """One model's linear layers' forms under one kernel setting: its choices, settled by measurement under
    ``auto``, and the patch that runs them for the duration of a pass (:meth:`applied`).

    ``kernel`` is one of :data:`.names.KERNELS` (``--specbench-kernels``). The object belongs with its model:
    whoever owns the model keeps one per model and setting, so that what :meth:`settle` measured serves every
    later run of that model, and no other model's.
    """

    def __init__(self, model: torch.nn.Module, kernel: str = AUTO) -> None:
        _check_kernel(kernel)
        self.model = model
        self.kernel = kernel
        # {(layer group, row count): form}, under auto: what settle() measured
        self._chosen: dict[tuple[_Group, int], str] = {}

    def __repr__(self) -> str:
        return f"KernelForms({type(self.model).__name__}, kernel={self.kernel!r}, settled={len(self._chosen)})"

    @torch.inference_mode()
    def settle(self, max_rows: int) -> None:
        """Under ``auto``, settle every (layer group, row count 1 .. ``max_rows``) not settled yet, so that no
        timed run measures one: as this machine settled it before (:mod:`.settled_forms`), else measured now and
        kept for later runs; any other setting has nothing to settle."""
        if self.kernel != AUTO:
            return
        wanted: dict[str, tuple[_Group, int, list[torch.nn.Linear]]] = {}
        for group, layers in _layers(self.model).items():
            for rows in range(1, max_rows + 1):
                if (group, rows) not in self._chosen:
                    wanted[_settled_key(group, rows)] = (group, rows, layers)
        if not wanted:
            return
        device = next(iter(wanted.values()))[2][0].weight.device
        forms = settled(
            settled_path(device),
            {
                key: functools.partial(_fastest, layers, _applicable(group, layers[0], rows), rows)
                for key, (group, rows, layers) in wanted.items()
            },
            lambda key, form: form in _applicable(wanted[key][0], wanted[key][2][0], wanted[key][1]),
        )
        for key, (group, rows, _) in wanted.items():
            self._chosen[group, rows] = forms[key]

    def _form(self, group: _Group, layer: torch.nn.Linear, rows: int) -> str:
        if self.kernel == AUTO:
            return self._chosen.get((group, rows), OWN)
        forced = _FORCED.get(self.kernel, OWN)
        return forced if forced in _applicable(group, layer, rows) else OWN

    def choices(self, max_rows: int = few_rows.MAX_ROWS + 1) -> dict:
        """``{(weight shape, dtype name, is the head): {row count: form}}`` for row counts 1 .. ``max_rows``."""
        return {
            (group[0], str(group[1]).removeprefix("torch."), group[2]): {
                rows: self._form(group, layers[0], rows) for rows in range(1, max_rows + 1)
            }
            for group, layers in _layers(self.model).items()
        }

    def digest(self, max_rows: int) -> str:
        """Its forms at 1 .. ``max_rows`` rows as a short digest (12 hex digits): two runs whose digests agree ran
        the same forms, so the same bits."""
        text = json.dumps(sorted((repr(group), rows) for group, rows in self.choices(max_rows).items()))
        return hashlib.sha256(f"{self.kernel} {text}".encode()).hexdigest()[:12]

    def described(self, rows: int = 1) -> str:
        """The forms its linear layers run at ``rows`` rows, as a row records them (``"rows in 168 layers; column in
        the head"``), or, after ``"own: "``, why none can be the engine's: the setting keeps the model's own, or no
        layer is a plain float ``torch.nn.Linear`` (a dynamic int8 copy's are quantised: they run torch's int8
        kernels)."""
        if self.kernel == LINEAR:
            return "own: --specbench-kernels=linear keeps the model's own kernels"
        counts: dict[str, int] = {}
        head: str | None = None
        for group, layers in _layers(self.model).items():
            form = self._form(group, layers[0], rows)
            if group[2]:
                head = form
            else:
                counts[form] = counts.get(form, 0) + len(layers)
        if not counts and head is None:
            kinds: dict[str, int] = {}
            for module in self.model.modules():
                if _linear_like(module):
                    name = f"{type(module).__module__.split('.modules')[0]} {type(module).__name__}"
                    kinds[name] = kinds.get(name, 0) + 1
            held = f" ({', '.join(f'{name} x {count}' for name, count in sorted(kinds.items()))})" if kinds else ""
            return f"own: no plain float linear layer{held}, so its layers ran their own kernels"
        parts = [f"{form} in {count} layers" for form, count in sorted(counts.items())]
        if head:
            parts.append(f"{head} in the head")
        fallback = self.few_rows_fallback()
        return "; ".join(parts) + (f" (few-rows kernel not built: {fallback})" if fallback else "")

    def _rows_using(self, max_rows: int, forms_used: tuple[str, ...], head_only: bool) -> list[int]:
        chosen = self.choices(max_rows)
        return sorted(
            {
                rows
                for group, forms in chosen.items()
                if group[2] or not head_only
                for rows, f in forms.items()
                if f in forms_used
            }
        )

    def column_head_rows(self, max_rows: int) -> list[int]:
        """The row counts 1 .. ``max_rows`` whose output head runs as ``weight @ hidden.T``."""
        return self._rows_using(max_rows, (COLUMN,), head_only=True)

    def few_rows_rows(self, max_rows: int) -> list[int]:
        """The row counts 1 .. ``max_rows`` at which some linear layer runs the few-rows kernel."""
        return self._rows_using(max_rows, tuple(_VARIANTS), head_only=False)

    @property
    def wants_few_rows(self) -> bool:
        """Whether this setting would run the few-rows kernel somewhere in this model: ``auto`` or ``rows``, and
        a plain linear layer whose weights it computes."""
        return self.kernel in (AUTO, ROWS) and few_rows.applies_to(self.model)

    def few_rows_fallback(self) -> str | None:
        """Why the few-rows kernel this setting asks for (:attr:`wants_few_rows`) is not running: it could not be
        built here (:func:`.few_rows.unavailable_reason`), so its layers keep the other forms (``rows`` forced:
        the model's own). None where it is built, or where nothing asks for it."""
        return few_rows.unavailable_reason() if self.wants_few_rows else None

    @property
    def few_rows_kernel(self) -> str:
        """A row's ``few_rows_kernel``: the build that ran (:func:`.few_rows.identity`), why none could
        (:meth:`few_rows_fallback`), or ``""`` where this setting and model have no use for it."""
        return few_rows.recorded_state() if self.wants_few_rows else ""

    def check_available(self) -> None:
        """RuntimeError naming why, where the setting forces the few-rows kernel (``rows``) and it cannot run:
        asked for by name, it is never replaced in silence by torch's kernels."""
        reason = self.few_rows_fallback() if self.kernel == ROWS else None
        if reason:
            raise RuntimeError(
                f"the kernel setting rows asks for the few-rows kernel, which cannot run here: {reason}; "
                f"accepted here: auto (torch's own kernels where the few-rows kernel cannot run), column, linear"
            )

    def _patched_forward(self, layer: torch.nn.Linear, group: _Group) -> Callable:
        own = layer.forward
        table = self._chosen
        if self.kernel == AUTO:

            def forward(hidden: torch.Tensor) -> torch.Tensor:
                return _call(table.get((group, hidden.numel() // hidden.shape[-1]), OWN), layer, hidden, own)

            return forward
        # A forced kernel's forms are fixed now, so that a compiled step traces a lookup, not the kernel's build.
        forced = {rows: self._form(group, layer, rows) for rows in range(1, few_rows.MAX_ROWS + 1)}

        def forced_forward(hidden: torch.Tensor) -> torch.Tensor:
            return _call(forced.get(hidden.numel() // hidden.shape[-1], OWN), layer, hidden, own)

        return forced_forward

    @contextlib.contextmanager
    def applied(self) -> Iterator[KernelForms]:
        """Within the block, calls of the model's linear layers use this setting's forms (see the module notes);
        after it, the layers are the model's own again, even after an error.

        Leaves alone layers that are not a plain float ``torch.nn.Linear`` (quantised ones, say), and every
        layer an enclosing block (of this object or another of the same model) already holds.
        """
        self.check_available()
        patched: list[torch.nn.Linear] = []
        try:
            if self.kernel != LINEAR:
                for group, layers in _layers(self.model).items():
                    for layer in layers:
                        layer.forward = self._patched_forward(layer, group)
                        patched.append(layer)
            yield self
        finally:
            for layer in patched:
                vars(layer).pop("forward", None)


def kernel_forms(model: torch.nn.Module, kernels: KernelForms | str) -> KernelForms:
    """``kernels`` itself where it is a :class:`KernelForms` (of ``model``: ValueError otherwise), else new forms
    of ``model`` under that setting, for one call (nothing settled yet)."""
    if isinstance(kernels, KernelForms):
        if kernels.model is not model:
            raise ValueError(
                f"these kernel forms belong to another model ({type(kernels.model).__name__} object at "
                f"{id(kernels.model):#x}); accepted: the forms of the model passed, or a kernel setting "
                f"({', '.join(KERNELS)})"
            )
        return kernels
    return KernelForms(model, kernels)


def draft_kernel_forms(
    draft_model: torch.nn.Module | None, kernels: KernelForms | str | None, target_forms: KernelForms, rows: int
) -> KernelForms | None:
    """A draft model's forms beside its target's: ``kernels`` (its own :class:`KernelForms`, or a setting; None: the
    target's setting, so that every model in the loop runs one), ``target_forms`` itself where the draft is the
    target, forms made here settled for ``rows`` (the most its passes read); None without a draft model."""
    if draft_model is None:
        return None
    if draft_model is target_forms.model:
        return target_forms  # one model, one set of forms: its layers are patched once
    given = target_forms.kernel if kernels is None else kernels
    forms = kernel_forms(draft_model, given)
    if forms is not given:
        forms.settle(rows)
    return forms
