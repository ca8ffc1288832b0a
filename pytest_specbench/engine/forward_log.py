"""Record a model's forward passes from outside: how many positions each fed, onto what cache, and when.

Used to read what a loop we did not write (transformers' assisted generation) actually did, and to
split any loop's wall time into time inside forward passes and the loop's own overhead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..kernels.timing import DeviceClock


@dataclass
class ForwardCall:
    cached: int  # positions already in the cache when the pass started
    fed: int  # positions this pass fed
    start_s: float
    end_s: float = 0.0

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


@dataclass
class ForwardLog:
    """The passes of one model while the log is attached (``with ForwardLog.attached(model) as log``)."""

    calls: list[ForwardCall] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(call.seconds for call in self.calls)

    def seconds_after(self, moment: float) -> float:
        """Time inside the passes that started at or after ``moment``."""
        return sum(call.seconds for call in self.calls if call.start_s >= moment)

    @classmethod
    def attached(cls, model: torch.nn.Module) -> _Attached:
        return _Attached(cls(), model)


def _cached_length(kwargs: dict) -> int:
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    return int(cache.get_seq_length()) if cache is not None and hasattr(cache, "get_seq_length") else 0


def _fed_length(args: tuple, kwargs: dict) -> int:
    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is None:
        ids = kwargs.get("inputs_embeds")
    return int(ids.shape[1]) if ids is not None else 0


class _Attached:
    """Context manager: hooks on while inside, removed on exit (also on an exception)."""

    def __init__(self, log: ForwardLog, model: torch.nn.Module) -> None:
        self.log, self.model = log, model
        self._clock = DeviceClock(next(model.parameters()).device)
        self._handles: list = []

    def __enter__(self) -> ForwardLog:
        def before(module, args, kwargs):
            self.log.calls.append(ForwardCall(_cached_length(kwargs), _fed_length(args, kwargs), self._clock.now()))

        def after(module, args, kwargs, output):
            self.log.calls[-1].end_s = self._clock.now()

        self._handles = [
            self.model.register_forward_pre_hook(before, with_kwargs=True),
            self.model.register_forward_hook(after, with_kwargs=True),
        ]
        return self.log

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
