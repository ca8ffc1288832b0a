"""The target's output head over a verify block as ``weight @ hidden.T``: one of the verify pass's forms.

On CPU, torch's ``linear`` over a few rows of a large head can run far below memory speed where
``weight @ hidden.T`` does not (docs/engines.md, "The verify pass's kernels"). Both compute the same dot
products; :mod:`.verify_forms` decides where each form runs.
"""

from __future__ import annotations

import torch

__all__ = ["column_logits"]


def column_logits(head: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    """``head(hidden)`` computed as ``weight @ hidden.T`` (contiguous, the shape ``head`` would give)."""
    rows = hidden.reshape(-1, hidden.shape[-1])
    logits = torch.mm(head.weight, rows.t()).t()
    if head.bias is not None:
        logits = logits + head.bias
    return logits.contiguous().reshape(*hidden.shape[:-1], logits.shape[-1])
