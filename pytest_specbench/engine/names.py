"""Names of the engine's choices that need no torch: safe to import at pytest start-up."""

from __future__ import annotations

#: the kernel settings (--specbench-kernels): how the native engine computes every linear layer of the target's
#: passes, one-row steps included (engine/verify_forms.py): ``auto``, the measured-fastest form per layer shape and
#: row count; ``rows``, the few-rows kernel wherever it applies (float32 and bfloat16 on CPU); ``column``, the
#: output head as ``weight @ hidden.T``; ``linear``, the model's own
KERNELS: tuple[str, ...] = ("auto", "rows", "column", "linear")

#: a row's ``few_rows_kernel`` where the few-rows kernel ran: this word and the build's identity
#: (engine/few_rows.py ``identity``); rows of earlier versions hold the word alone
FEW_ROWS_BUILT = "built"
#: after the build's identity, where the CPU has AMX and the kernel's tiles cannot run: ``, without AMX tiles: why``
WITHOUT_TILES = "without AMX tiles"


def few_rows_built(recorded: str) -> bool:
    """Whether a row's ``few_rows_kernel`` says the few-rows kernel ran (not why it did not, nor empty)."""
    return recorded == FEW_ROWS_BUILT or recorded.startswith(FEW_ROWS_BUILT + " ")


#: the k values that name a draft-length schedule instead of a constant k (engine/schedules.py):
#: ``auto``, the cost model's choice per step; ``heuristic``, transformers' own schedule
AUTO = "auto"
HEURISTIC = "heuristic"
SCHEDULES: tuple[str, ...] = (AUTO, HEURISTIC)

#: drafter options a pair may leave out (pairs files, built-in pairs): a truncated target keeps its first
#: DEFAULT_TRUNCATED_LAYERS blocks; prompt lookup matches n-grams of up to DEFAULT_NGRAM_SIZE tokens
DEFAULT_TRUNCATED_LAYERS = 2
DEFAULT_NGRAM_SIZE = 3
