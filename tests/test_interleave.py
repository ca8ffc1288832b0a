"""The baseline interleaved with a speculative run: what runs between the steps, what it reports, and that the
speculative run's own output and times are untouched by it."""

from __future__ import annotations

import functools
import math
import time

import pytest
import torch
from factory import hf_generate, tiny_pair

from pytest_specbench import greedy_generate, speculative_generate
from pytest_specbench.engine.decoding import GreedyStepper
from pytest_specbench.engine.interleave import InterleavedBaseline
from pytest_specbench.kernels.timing import DeviceClock

PROMPT = [30, 31, 32, 5, 17]
NEW_TOKENS = 13

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@functools.cache
def pair():
    return tiny_pair("llama")


def _stepper() -> GreedyStepper:
    return GreedyStepper(pair()[0], PROMPT, NEW_TOKENS)


def test_the_stepper_is_greedy_generate_and_matches_transformers() -> None:
    target, _ = pair()
    stepper = _stepper()
    while not stepper.done:
        stepper.step()
    expected = hf_generate(target, PROMPT, NEW_TOKENS)
    assert stepper.result(greedy_generate(target, PROMPT, NEW_TOKENS).stats).token_ids == expected
    assert greedy_generate(target, PROMPT, NEW_TOKENS).token_ids == expected


def test_between_steps_runs_after_the_prefill_and_each_decode_step_and_its_time_is_left_out() -> None:
    target, draft = pair()
    alone = speculative_generate(target, draft, PROMPT, 2, NEW_TOKENS)
    calls = []

    def pause(seconds: float) -> None:
        calls.append(seconds)
        time.sleep(0.05)

    hooked = speculative_generate(target, draft, PROMPT, 2, NEW_TOKENS, between_steps=pause)
    assert hooked.token_ids == alone.token_ids == hf_generate(target, PROMPT, NEW_TOKENS)
    assert len(calls) == hooked.stats.steps  # the prefill and every decode step
    assert calls[0] == pytest.approx(hooked.stats.prefill_time_s)
    # 0.05 s a call slept, none of it counted: the run's time is its steps' time.
    assert hooked.stats.wall_time_s < 0.05 * len(calls)
    assert hooked.stats.wall_time_s == pytest.approx(sum(calls), rel=0.05, abs=0.005)
    assert hooked.stats.decode_time_s >= hooked.stats.draft_time_s + hooked.stats.verify_time_s - 1e-9


def test_the_baseline_catches_up_with_the_run_and_reports_a_whole_run_at_its_speed() -> None:
    target, draft = pair()
    baseline = InterleavedBaseline(_stepper, DeviceClock("cpu"))
    run = speculative_generate(target, draft, PROMPT, 2, NEW_TOKENS, between_steps=baseline.after_step)
    as_run = baseline.result(run)
    assert baseline.decode_time_s >= baseline.run_decode_s > 0
    assert baseline.decode_tokens >= 1
    per_token = baseline.decode_time_s / baseline.decode_tokens
    assert as_run.stats.new_tokens == run.stats.new_tokens
    assert as_run.stats.time_per_decode_token_s == pytest.approx(per_token)
    assert as_run.stats.wall_time_s == pytest.approx(baseline.prefill_time_s + per_token * (NEW_TOKENS - 1))
    assert as_run.stats.prefill_time_s == baseline.prefill_time_s > 0
    # Its tokens are the target's own greedy tokens, as far as it got.
    expected = hf_generate(target, PROMPT, NEW_TOKENS)
    assert 2 <= len(as_run.token_ids) <= NEW_TOKENS
    assert as_run.token_ids == expected[: len(as_run.token_ids)]


class TickingClock(DeviceClock):
    """Each reading one second after the one before: every timed step takes exactly one second, whatever the
    machine is doing."""

    def __init__(self) -> None:
        super().__init__("cpu")
        self.seconds = 0.0

    def now(self) -> float:
        self.seconds += 1.0
        return self.seconds


def test_a_baseline_that_reaches_the_runs_length_starts_again_without_counting_the_prefill() -> None:
    starts = []

    def counted() -> GreedyStepper:
        starts.append(1)
        return _stepper()

    baseline = InterleavedBaseline(counted, TickingClock())
    baseline.after_step(0.001)  # the prefill
    baseline.after_step(3 * NEW_TOKENS)  # a step as long as three whole baseline runs and more
    assert len(starts) == 4
    assert baseline.decode_time_s == baseline.run_decode_s == 3 * NEW_TOKENS
    # Decode steps only, one second each: the restarts' prefills are not counted.
    assert baseline.decode_tokens == 3 * NEW_TOKENS
    assert baseline.prefill_time_s == 1.0


def test_a_result_before_any_step_is_an_error() -> None:
    target, draft = pair()
    run = speculative_generate(target, draft, PROMPT, 2, NEW_TOKENS)
    with pytest.raises(RuntimeError, match="between_steps"):
        InterleavedBaseline(_stepper, DeviceClock("cpu")).result(run)


class _Deferred(InterleavedBaseline):
    """A planted bug: the baseline's steps wait for the run's end instead of running between its steps."""

    def after_step(self, seconds: float) -> None:
        self._pending = getattr(self, "_pending", 0.0) + seconds

    def catch_up(self) -> None:
        pending, self._pending = self._pending, 0.0
        super().after_step(0.0)
        super().after_step(pending)


def _spreads(baseline_kind: type[InterleavedBaseline]) -> tuple[float, float, float]:
    """On a simulated machine whose speed jumps between two states about once a second: the mean interleaved
    speedup over the true one, and the spreads (log sd over 40 rounds) of the interleaved speedups and of
    speedups against a baseline run beside the speculative one."""
    speed = _Machine(seed=1)

    class Stepper:
        done = False

        def step(self) -> None:
            speed.spend(0.08)  # a baseline token: 80 ms at full speed

    def run(between_steps=None) -> float:
        """The decode seconds of a run: a prefill, then 8 steps of 3 tokens, 2.5x the baseline's speed."""
        decode = 0.0
        for index, cost in enumerate([0.05] + [0.12] * 8):
            seconds = speed.spend(cost)
            decode += seconds if index else 0.0
            if between_steps:
                between_steps(seconds)
        return decode

    interleaved, beside = [], []
    for _ in range(40):
        baseline = baseline_kind(Stepper, speed)
        decode_s = run(baseline.after_step)
        if isinstance(baseline, _Deferred):
            baseline.catch_up()
        interleaved.append(math.log(baseline.decode_time_s / baseline.decode_tokens / (decode_s / 24)))
        base_s = sum(speed.spend(0.08) for _ in range(25))
        beside.append(math.log(base_s / 25 / (run() / 24)))
    true_speedup = 0.08 * 3 / 0.12
    return (
        math.exp(sum(interleaved) / len(interleaved)) / true_speedup,
        torch.tensor(interleaved).std().item(),
        torch.tensor(beside).std().item(),
    )


def test_interleaving_cancels_a_machine_speed_shared_by_both_runs() -> None:
    """The baseline timed between a run's steps gives the true speedup, round after round; one run beside it
    does not. (Seeds 0 to 4 gave spreads of 2.8% to 3.6% interleaved and 14% to 17% beside.)"""
    bias, spread_interleaved, spread_beside = _spreads(InterleavedBaseline)
    assert abs(bias - 1) < 0.03
    assert spread_interleaved < spread_beside / 3


def test_the_spread_check_catches_a_baseline_that_waits_for_the_runs_end() -> None:
    _, spread_deferred, spread_beside = _spreads(_Deferred)
    assert not spread_deferred < spread_beside / 3


class _Machine:
    """A fake clock whose work runs at one of two speeds, switching at random about once a second (as measured:
    runs of tokens at 77 ms, then at 110 ms)."""

    def __init__(self, seed: int) -> None:
        self.rng = torch.Generator().manual_seed(seed)
        self.t, self.factor, self.last = 0.0, 1.0, 1.0

    def now(self) -> float:
        return self.t

    def spend(self, cost: float) -> float:
        if torch.rand(1, generator=self.rng).item() < cost / 1.0:
            self.factor = 1.4 if self.factor == 1.0 else 1.0
        seconds = cost * self.factor
        self.t += seconds
        self.last = self.factor
        return seconds
