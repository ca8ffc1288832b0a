"""What one worker measures once and shares between the cases that need it.

Every cache here has its own name, and every key is a case's :meth:`~..cases.matrix.Case.key`: the axes the cache
depends on and the settings beyond them, named, so what a case reuses (and what it must not) can be read off the call:
the tokenised prompt per target, the batched reference per target and batch, the pair's cost profile, the
warm-up per pair and engine, the models' sizes, and the sampling check per case input.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import torch

from .costs import CostProfile

T = TypeVar("T")


def _once(table: dict[Hashable, T], key: Hashable, compute: Callable[[], T]) -> T:
    if key not in table:
        table[key] = compute()
    return table[key]


class SharedMeasurements:
    def __init__(self) -> None:
        self._input_ids: dict[Hashable, torch.Tensor] = {}
        self._costs: dict[Hashable, CostProfile] = {}
        self._warmed: set[Hashable] = set()
        self._sizes: dict[Hashable, dict[str, int]] = {}
        self._sampling_checks: dict[Hashable, dict[str, Any]] = {}
        self._batched_references: dict[Hashable, list[list[int]]] = {}

    def input_ids(self, key: tuple, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        """By target and prompt (and turn): every pair with that target reads the same tokens."""
        return _once(self._input_ids, key, compute)

    def costs(self, key: tuple, compute: Callable[[], CostProfile]) -> CostProfile:
        """By pair and dtype (and batch), and the probe's settings; the warm-up's profile once :meth:`replace_costs`
        has stored it."""
        return _once(self._costs, key, compute)

    def replace_costs(self, key: tuple, costs: CostProfile) -> None:
        """Every later case with this key reads ``costs`` (the draft's costs as the warm-up timed them)."""
        self._costs[key] = costs

    def warm_up(self, key: tuple, run: Callable[[], T]) -> T | None:
        """Once per (pair, dtype, engine, batch): first-call costs (allocations, kernel choice) are paid here, untimed.
        What ``run`` returned the first time; None when the key was warm already."""
        if key in self._warmed:
            return None
        result = run()
        self._warmed.add(key)
        return result

    def sizes(self, key: tuple, compute: Callable[[], dict[str, int]]) -> dict[str, int]:
        """By pair: its models' parameter counts."""
        return _once(self._sizes, key, compute)

    def sampling_check(self, key: tuple, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """By pair, dtype and prompt (and turn), and the sampling settings, draws and seed."""
        return _once(self._sampling_checks, key, compute)

    def batched_reference(self, key: tuple, compute: Callable[[], list[list[int]]]) -> list[list[int]]:
        """By target and dtype, the batch's prompt ids, new tokens and EOS: every case of a batched block decodes the
        same batch, so its target's batched ``generate`` runs once."""
        return _once(self._batched_references, key, compute)
