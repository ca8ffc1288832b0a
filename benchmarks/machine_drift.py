"""How the machine's speed drifts: the timescale that sets where the baselines of a round go.

    python benchmarks/machine_drift.py --runs 40

Runs the embedded Gemma 3 270M's greedy decode (32 new tokens, the default run's baseline) back to back and
prints the spread of each run's time per decode token (log standard deviation) and its autocorrelation at lags
of 1 to 10 runs: how alike two runs are a few seconds apart. Then it prices pairing designs on the same
series: each run treated as a case, its baseline read from runs around it (one baseline every N runs,
interpolated between the two around it, or the nearest one), giving the spread of the log ratio the interval is
built on. Not a test: run it alone on the machine being measured (needs the ``embedded`` extra).

    python benchmarks/machine_drift.py --interleaved --runs 15

prices the interleaved pairing instead (``--specbench-pairing=interleaved``): two identical greedy decodes timed
one after the other, then token by token in turn, ``--runs`` times each; prints the spread of their log time
ratio both ways (identical work, so any spread is the machine's).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_specbench.engine.decoding import GreedyStepper, greedy_generate  # noqa: E402
from pytest_specbench.kernels.timing import DeviceClock  # noqa: E402


def autocorrelation(values: np.ndarray, lag: int) -> float:
    centred = values - values.mean()
    return float((centred[:-lag] * centred[lag:]).sum() / (centred * centred).sum())


def pairing_spread(log_times: np.ndarray, every: int, interpolate: bool) -> float:
    """The log ratio's spread when a baseline runs every ``every`` + 1 runs and the others are cases."""
    errors = []
    for offset in range(every + 1):
        bases = list(range(offset, len(log_times), every + 1))
        for index in range(len(log_times)):
            before = [base for base in bases if base < index]
            after = [base for base in bases if base > index]
            if index in bases or not before or not after:
                continue
            low, high = before[-1], after[0]
            weight = (index - low) / (high - low) if interpolate else float(index - low > high - index)
            errors.append(log_times[index] - ((1 - weight) * log_times[low] + weight * log_times[high]))
    return float(np.std(errors))


def interleaved_spreads(model, ids, runs: int, new_tokens: int = 32) -> None:
    """Two identical greedy decodes, ``runs`` times one after the other and ``runs`` times token by token in
    turn (which one steps first alternating): the spread of their log decode time ratio each way."""
    clock = DeviceClock(model.device)

    def decode_seconds(steppers: list[GreedyStepper]) -> list[float]:
        totals = [0.0] * len(steppers)
        for stepper in steppers:
            stepper.step()  # the prefill, not counted
        for token in range(new_tokens - 1):
            order = range(len(steppers)) if token % 2 else reversed(range(len(steppers)))
            for index in order:
                start = clock.now()
                steppers[index].step()
                totals[index] += clock.now() - start
        return totals

    whole, interleaved = [], []
    for _ in range(runs):
        first = decode_seconds([GreedyStepper(model, ids, new_tokens)])[0]
        second = decode_seconds([GreedyStepper(model, ids, new_tokens)])[0]
        whole.append(math.log(first / second))
        pair = decode_seconds([GreedyStepper(model, ids, new_tokens), GreedyStepper(model, ids, new_tokens)])
        interleaved.append(math.log(pair[0] / pair[1]))
    print(
        f"{runs} pairs of identical greedy decodes ({new_tokens} new tokens): log time ratio sd "
        f"{float(np.std(whole)):.4f} one run after the other, {float(np.std(interleaved)):.4f} token by token"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--interleaved", action="store_true", help="price the interleaved pairing instead")
    args = parser.parse_args()
    from pytest_specbench.cases.prompts import load_prompts, select_prompts
    from pytest_specbench.measure.inputs import prompt_input_ids
    from pytest_specbench.models.loading import load_model

    loaded = load_model("embedded:gemma3-270m")
    suite = load_prompts()
    prompt = select_prompts(suite, ["natural"], 1)[0]
    ids = prompt_input_ids(loaded.tokenizer, prompt, suite, None, "cpu")
    greedy_generate(loaded.model, ids, 32)  # first-call costs, untimed
    if args.interleaved:
        interleaved_spreads(loaded.model, ids, args.runs)
        return
    seconds = [greedy_generate(loaded.model, ids, 32).stats.time_per_decode_token_s for _ in range(args.runs)]
    log_times = np.log(seconds)
    print(
        f"{args.runs} runs, {1000 * float(np.mean(seconds)):.1f} ms per decode token, "
        f"log sd {float(np.std(log_times)):.3f}"
    )
    print(
        "autocorrelation by lag (runs):",
        ", ".join(f"{lag}: {autocorrelation(log_times, lag):.2f}" for lag in (1, 2, 3, 5, 10) if lag < args.runs),
    )
    for every in (1, 2, 3, 5):
        print(
            f"baseline every {every} cases: log ratio sd interpolated {pairing_spread(log_times, every, True):.3f}, "
            f"nearest {pairing_spread(log_times, every, False):.3f}"
        )
    print("runs (ms per decode token):", " ".join(str(round(1000 * value)) for value in seconds))


if __name__ == "__main__":
    main()
