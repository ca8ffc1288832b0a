"""Names of the engine's choices that need no torch: safe to import at pytest start-up."""

from __future__ import annotations

#: the k values that name a draft-length schedule instead of a constant k (engine/schedules.py):
#: ``auto``, the cost model's choice per step; ``heuristic``, transformers' own schedule
AUTO = "auto"
HEURISTIC = "heuristic"
SCHEDULES: tuple[str, ...] = (AUTO, HEURISTIC)

#: drafter options a pair may leave out (pairs files, built-in pairs): a truncated target keeps its first
#: DEFAULT_TRUNCATED_LAYERS blocks; prompt lookup matches n-grams of up to DEFAULT_NGRAM_SIZE tokens
DEFAULT_TRUNCATED_LAYERS = 2
DEFAULT_NGRAM_SIZE = 3
