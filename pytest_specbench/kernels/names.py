"""Names of the kernels' choices that need no torch: safe to import at pytest start-up."""

from __future__ import annotations

#: the kernel settings (--specbench-kernels): how the native engine computes every linear layer of the target's
#: passes, one-row steps included (kernels/verify_forms.py): ``auto``, the measured-fastest form per layer shape and
#: row count; ``rows``, the few-rows kernel wherever it applies (float32 and bfloat16 on CPU); ``column``, the
#: output head as ``weight @ hidden.T``; ``linear``, the model's own
KERNELS: tuple[str, ...] = ("auto", "rows", "column", "linear")

#: a row's ``few_rows_kernel`` where the few-rows kernel ran: this word and the build's identity
#: (kernels/few_rows.py ``identity``); rows of earlier versions hold the word alone
FEW_ROWS_BUILT = "built"
#: after the build's identity, where the CPU has AMX and the kernel's tiles cannot run: ``, without AMX tiles: why``
WITHOUT_TILES = "without AMX tiles"


def few_rows_built(recorded: str) -> bool:
    """Whether a row's ``few_rows_kernel`` says the few-rows kernel ran (not why it did not, nor empty)."""
    return recorded == FEW_ROWS_BUILT or recorded.startswith(FEW_ROWS_BUILT + " ")
