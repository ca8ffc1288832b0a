"""Names of the engine's choices that need no torch: safe to import at pytest start-up."""

from __future__ import annotations

#: how the native engine computes the target's output head over a verify block (engine/output_head.py):
#: ``auto``, the measured-faster form per row count; ``column``, always ``weight @ hidden.T``;
#: ``linear``, always the model's own head
HEAD_KERNELS: tuple[str, ...] = ("auto", "column", "linear")
