"""A batched KV cache whose rows hold different numbers of tokens, for the batched engine and a batched draft.

One ``DynamicCache`` with a batch dimension, and beside it a boolean *validity mask* (rows, slots): a slot
is a position in the cache tensors, and a row's tokens are its valid slots, in order. Every pass gets the
mask as its ``attention_mask`` and explicit ``position_ids``, so no row sees another's layout. A rollback
turns a row's rejected slots into *holes*, masked like left padding, because a batched tensor cannot be
cropped per row without copying every layer; slots no row holds any more are cropped at the end.

Holes are wrong for sliding-window layers (their mask counts slots, not tokens), so a cache with such
layers is *compacted* after each rollback instead: each row's valid slots are gathered to the right, and
every row is plainly left padded again (``layout="compact"``, chosen automatically). While no row has
padding or a hole (always at batch 1), passes get no mask and no positions, as the unbatched engine's do.
Compaction reads the layers' tensors directly (``DynamicLayer`` and ``DynamicSlidingWindowLayer`` only).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

__all__ = ["RowCache"]


def _has_sliding_layers(cache: DynamicCache) -> bool:
    return any(getattr(layer, "is_sliding", False) for layer in cache.layers)


class RowCache:
    """A batched ``DynamicCache`` whose rows hold different numbers of tokens (see the module docstring).

    ``valid`` (rows, slots) marks which cache slots hold a row's tokens; ``lengths`` counts them.
    """

    def __init__(self, model: PreTrainedModel, layout: str = "auto") -> None:
        self.model = model
        self.cache = DynamicCache(config=model.config)
        sliding = _has_sliding_layers(self.cache)
        if layout not in ("auto", "holes", "compact"):
            raise ValueError(f"layout must be 'auto', 'holes' or 'compact', got {layout!r}")
        if layout == "holes" and sliding:
            raise ValueError("layout='holes' is wrong for a model with sliding-window layers: use 'auto' or 'compact'")
        self.compact = sliding if layout == "auto" else layout == "compact"
        for layer in self.cache.layers:
            if self.compact and type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer):
                raise ValueError(
                    f"compacting a batched cache supports DynamicLayer and DynamicSlidingWindowLayer, "
                    f"not {type(layer).__name__}"
                )
        # Sliding layers keep every state until the next crop, which the rollback always calls.
        self.cache.activate_past_recording()
        self.valid: torch.Tensor | None = None
        self.lengths: torch.Tensor | None = None
        self.dense = True  # no row has a hole or padding
        self.forward_passes = 0

    @property
    def layout(self) -> str:
        """The layout in use: ``"compact"`` or ``"holes"``."""
        return "compact" if self.compact else "holes"

    @property
    def slots(self) -> int:
        return 0 if self.valid is None else self.valid.shape[1]

    def forward(
        self, input_ids: torch.Tensor, new_valid: torch.Tensor | None = None, logits_to_keep: int = 1
    ) -> torch.Tensor:
        """Feed ``input_ids`` (rows, W), of which ``new_valid`` (rows, W) marks the real tokens (``None``: all
        of them); return the logits. The W new slots are appended; the invalid ones are holes from the start.

        While no row has a hole or padding (``dense``: batch 1 always, since its rejected drafts are cropped),
        the pass gets neither mask nor positions, as the unbatched engine's passes do.
        """
        rows, width = input_ids.shape
        device = input_ids.device
        if new_valid is None:
            new_valid = torch.ones((rows, width), dtype=torch.bool, device=device)
            dense = self.dense
        else:
            dense = False
        if self.valid is None:
            valid = new_valid
            lengths = torch.zeros(rows, dtype=torch.long, device=device)
        else:
            valid = torch.cat([self.valid, new_valid], dim=1)
            lengths = self.lengths
        if dense:
            out = self.model(input_ids=input_ids, cache=self.cache, use_cache=True, logits_to_keep=logits_to_keep)
        else:
            positions = (lengths.unsqueeze(1) + new_valid.long().cumsum(dim=1) - 1).clamp(min=0)
            out = self.model(
                input_ids=input_ids,
                attention_mask=valid.long(),
                position_ids=positions,
                cache=self.cache,
                use_cache=True,
                logits_to_keep=logits_to_keep,
            )
        self.forward_passes += 1
        self.valid = valid
        self.lengths = lengths + new_valid.sum(dim=1)
        self.dense = dense
        return out.logits

    def rollback(self, keep: torch.Tensor) -> None:
        """Keep the first ``keep[b]`` tokens of each row ``b``; the rest become holes (then trimmed or compacted)."""
        keep = torch.minimum(keep.to(self.lengths.device), self.lengths)
        rank = self.valid.long().cumsum(dim=1)
        self.valid = self.valid & (rank <= keep.unsqueeze(1))
        self.lengths = keep.clone()
        self._tidy()

    def select(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (indices into the current batch)."""
        self.cache.batch_select_indices(rows)
        self.valid = self.valid[rows]
        self.lengths = self.lengths[rows]
        self._tidy()

    def _tidy(self) -> None:
        if self.compact:
            self._compact()
        else:
            self._crop_unheld()
        self.dense = bool(self.valid.all())

    def _crop_unheld(self) -> None:
        # Crop the slots at the end that no row holds any more.
        held = self.valid.any(dim=0).nonzero()
        end = int(held[-1, 0]) + 1 if held.numel() else 0
        excess = self.slots - end
        if excess > 0:
            self.cache.crop(-excess)
            self.valid = self.valid[:, :end]

    def _compact(self) -> None:
        """Gather each row's valid slots to the right, in order, and drop the columns no row holds."""
        slots = self.slots
        width = int(self.lengths.max()) if self.lengths.numel() else 0
        arange = torch.arange(slots, device=self.valid.device)
        # Per row: invalid slots first (as -1), then the valid slot indices in order; keep the last `width`.
        order = torch.where(self.valid, arange, -1).sort(dim=1).values[:, slots - width :]
        new_valid = order >= 0
        index = order.clamp(min=0)
        # Nothing to move when every row is already right-aligned (plain left padding) and no column is empty.
        aligned = width == slots and bool((self.valid == (arange >= slots - self.lengths.unsqueeze(1))).all())
        if not aligned:
            for layer in self.cache.layers:
                if not layer.is_initialized or layer.keys is None or layer.keys.numel() == 0:
                    continue
                held = layer.keys.shape[-2]
                if held == slots:
                    layer_index = index
                else:  # a sliding layer holding only its last `held` slots: compact within them
                    offset = slots - held
                    arange_h = torch.arange(held, device=index.device)
                    order_h = torch.where(self.valid[:, offset:], arange_h, -1).sort(dim=1).values
                    layer_index = order_h[:, held - min(held, width) :].clamp(min=0)
                gather = layer_index[:, None, :, None].to(layer.keys.device)
                layer.keys = layer.keys.gather(2, gather.expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3]))
                layer.values = layer.values.gather(
                    2, gather.expand(-1, layer.values.shape[1], -1, layer.values.shape[3])
                )
                if isinstance(layer, DynamicSlidingWindowLayer):
                    layer.cumulative_length = width
        self.valid = new_valid
        # Trims the sliding layers back to their window (a no-op for full layers).
        self.cache.crop(0)
