"""Names of the engine's choices that need no torch: safe to import at pytest start-up."""

from __future__ import annotations

#: how the native engine computes the target's output head over a verify block (engine/output_head.py):
#: ``auto``, the measured-faster form per row count; ``column``, always ``weight @ hidden.T``;
#: ``linear``, always the model's own head
HEAD_KERNELS: tuple[str, ...] = ("auto", "column", "linear")

#: the k values that name a draft-length schedule instead of a constant k (engine/schedules.py):
#: ``auto``, the cost model's choice per step; ``heuristic``, transformers' own schedule
AUTO = "auto"
HEURISTIC = "heuristic"
SCHEDULES: tuple[str, ...] = (AUTO, HEURISTIC)

#: drafter options a pair may leave out (pairs files, built-in pairs): a truncated target keeps its first
#: DEFAULT_TRUNCATED_LAYERS blocks; prompt lookup matches n-grams of up to DEFAULT_NGRAM_SIZE tokens
DEFAULT_TRUNCATED_LAYERS = 2
DEFAULT_NGRAM_SIZE = 3
