"""Does interleaving change what it times? A baseline stepped between a speculative run's steps, against whole runs.

    python benchmarks/interleave_bias.py --rounds 12 --k 1 --prompt natural
    python benchmarks/interleave_bias.py --rounds 10 --k pld --prompt repetitive

Embedded Gemma 3 270M, its int8 copy drafting at ``--k`` (``pld``: prompt lookup at k=4), 32 new tokens. Each round
runs, in rotating order, a whole greedy run, a speculative run alone, and a speculative run with its interleaved
baseline. Prints the ratio of the baseline's time per token interleaved to whole and of the speculative run's
interleaved to alone (each with its standard error, unpaired: a bias would show as a ratio away from 1), and the
speedup each way. Not a test: run it alone on the machine being measured (needs the ``embedded`` extra).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_specbench.engine.decoding import GreedyStepper, greedy_generate, speculative_generate  # noqa: E402
from pytest_specbench.engine.derived_models import int8_copy  # noqa: E402
from pytest_specbench.engine.drafters import PromptLookupDrafter  # noqa: E402
from pytest_specbench.engine.interleave import InterleavedBaseline  # noqa: E402
from pytest_specbench.kernels.timing import DeviceClock  # noqa: E402


def _standard_error(first: np.ndarray, second: np.ndarray) -> float:
    return math.sqrt(first.var(ddof=1) / len(first) + second.var(ddof=1) / len(second))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--k", default="1", help="the int8 draft's k, or pld for prompt lookup at k=4")
    parser.add_argument("--prompt", default="natural", help="a prompt category of the shipped suite")
    args = parser.parse_args()
    from pytest_specbench.cases.prompts import load_prompts, select_prompts
    from pytest_specbench.measure.inputs import prompt_input_ids
    from pytest_specbench.models.loading import load_model

    loaded = load_model("embedded:gemma3-270m")
    model = loaded.model
    draft, k = (PromptLookupDrafter(), 4) if args.k == "pld" else (int8_copy(model), int(args.k))
    suite = load_prompts()
    ids = prompt_input_ids(loaded.tokenizer, select_prompts(suite, [args.prompt], 1)[0], suite, None, "cpu")
    clock = DeviceClock("cpu")

    def whole() -> float:
        return greedy_generate(model, ids, 32).stats.time_per_decode_token_s

    def alone() -> float:
        return speculative_generate(model, draft, ids, k, 32).stats.time_per_decode_token_s

    def interleaved() -> tuple[float, float]:
        baseline = InterleavedBaseline(lambda: GreedyStepper(model, ids, 32), clock)
        run = speculative_generate(model, draft, ids, k, 32, between_steps=baseline.after_step)
        return baseline.result(run).stats.time_per_decode_token_s, run.stats.time_per_decode_token_s

    whole(), alone(), interleaved()  # first-call costs, untimed
    wholes, alones, baselines, speculatives = [], [], [], []
    for index in range(args.rounds):
        for kind in [(index + shift) % 3 for shift in range(3)]:
            if kind == 0:
                wholes.append(whole())
            elif kind == 1:
                alones.append(alone())
            else:
                base, spec = interleaved()
                baselines.append(base)
                speculatives.append(spec)
    log_whole, log_alone, log_base, log_spec = map(np.log, (wholes, alones, baselines, speculatives))
    print(f"{args.prompt}, k={args.k}, {args.rounds} rounds")
    print(
        f"baseline per token, interleaved / whole: {math.exp(log_base.mean() - log_whole.mean()):.3f} "
        f"(se {_standard_error(log_base, log_whole):.3f})"
    )
    print(
        f"speculative per token, interleaved / alone: {math.exp(log_spec.mean() - log_alone.mean()):.3f} "
        f"(se {_standard_error(log_spec, log_alone):.3f})"
    )
    unpaired = math.exp(log_whole.mean() - log_alone.mean())
    print(
        f"speedup, interleaved: {math.exp((log_base - log_spec).mean()):.3f} (round log sd "
        f"{(log_base - log_spec).std(ddof=1):.3f}); whole over alone: {unpaired:.3f} "
        f"(se {_standard_error(log_whole, log_alone):.3f})"
    )


if __name__ == "__main__":
    main()
