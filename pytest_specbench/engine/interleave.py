"""The baseline interleaved with a speculative run: target-only steps between the run's steps.

On a shared CPU the machine's speed changes within a second, so a baseline timed before or after a speculative
run sees another machine than the run did; interleaved token by token, the two see the same one (the figures:
docs/measuring.md, "The baseline, interleaved with each run"). :class:`InterleavedBaseline` is called
after each of a speculative run's steps (``speculative_generate(between_steps=...)``) and runs target-only greedy
steps until its decode time has caught up with the run's, so both are timed over the same seconds of the machine.

The baseline starts afresh with each speculative run: its prefill follows the run's and pairs with it (time to
first token); where it reaches the run's length before the run ends, it starts again and that prefill is not
counted. Its decode tokens are the first ones of a baseline run (as many as fit in the run's decode time), and
:meth:`InterleavedBaseline.result` states them as a whole baseline run of the run's length at the speed measured:
decode time per token times the decode tokens, plus the prefill.
"""

from __future__ import annotations

from collections.abc import Callable

from ..kernels.timing import DeviceClock
from .decoding import GreedyStepper
from .stats import DecodeStats, GenerationResult


class InterleavedBaseline:
    """One speculative run's baseline, timed in slices between its steps; pass :meth:`after_step` as
    ``between_steps`` and read :meth:`result` once the run is over."""

    def __init__(self, new_stepper: Callable[[], GreedyStepper], clock: DeviceClock) -> None:
        self._new_stepper = new_stepper
        self._clock = clock
        self._stepper: GreedyStepper | None = None  # the pass being stepped
        self._first: GreedyStepper | None = None  # the first pass: its tokens are the baseline's output
        self.prefill_time_s = 0.0
        self.run_decode_s = 0.0  # the speculative run's decode time so far
        self.decode_time_s = 0.0  # the baseline's
        self.decode_tokens = 0

    def after_step(self, seconds: float) -> None:
        """After the run's prefill, the baseline's prefill; after each decode step of ``seconds``, baseline
        decode steps until the baseline's decode time is at least the run's."""
        if self._first is None:  # the call after the run's prefill
            self._stepper = self._first = self._new_stepper()
            start = self._clock.now()
            self._stepper.step()
            self.prefill_time_s = self._clock.now() - start
            return
        self.run_decode_s += seconds
        while self.decode_time_s < self.run_decode_s:
            if self._stepper.done:
                self._stepper = self._new_stepper()
                self._stepper.step()  # a fresh prefill, not counted: only its decode steps are
            start = self._clock.now()
            self._stepper.step()
            self.decode_time_s += self._clock.now() - start
            self.decode_tokens += 1

    def result(self, run: GenerationResult) -> GenerationResult:
        """The baseline as a whole run of ``run``'s length: its prefill, and its decode speed over
        ``run``'s decode tokens. Its sequence is the prompt and the tokens of its first pass (a prefix of a
        baseline run's)."""
        if self._first is None:
            raise RuntimeError("the interleaved baseline never ran: pass after_step as between_steps")
        per_token = self.decode_time_s / self.decode_tokens if self.decode_tokens else 0.0
        new_tokens = run.stats.new_tokens
        decode_tokens = max(new_tokens - 1, 0)
        stats = DecodeStats(
            new_tokens=new_tokens,
            target_forward_passes=new_tokens,
            prefill_time_s=self.prefill_time_s,
            wall_time_s=self.prefill_time_s + per_token * decode_tokens,
            verify_time_s=per_token * decode_tokens,
        )
        stats.accepted_per_step = [0] * new_tokens
        stats.drafted_per_step = [0] * new_tokens
        stats.k_per_step = [0] * new_tokens
        return self._first.result(stats)
