"""Batched decoding's own overhead, and batch 1 against the unbatched engine: a quick check, not a benchmark run.

    python benchmarks/batched_overhead.py [--rounds 2] [--new-tokens 16] [--batches 1,4]

On a random GPT-2-shaped pair (nothing downloaded; sizes by ``--layers``/``--width``), for each batch
size it runs, interleaved round by round: ``batched_greedy_generate``, transformers' batched
``generate(do_sample=False)`` with the same left padding, and ``batched_speculative_generate`` with the
model draft and with prompt lookup at ``--k``; at batch 1 also the unbatched ``speculative_generate``.
Every run's rows must equal ``generate``'s. It prints medians of:

- engine overhead: the batched run's wall time outside the target's and the draft's forward passes
  (engine/forward_log.py), as a share of the wall time: bookkeeping, block building, cache rollback;
- batched greedy / ``generate`` speed (>= 1: the baseline is not a straw man);
- batch 1: batched / unbatched ``speculative_generate`` speed (the price of the batched loop);
- decode speedup of speculation over batched greedy, per batch size, and the tokens/s of both.

The defaults are small, for a quick check on a CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_specbench.engine.batched import (  # noqa: E402
    batched_greedy_generate,
    batched_speculative_generate,
    left_pad,
)
from pytest_specbench.engine.decoding import speculative_generate  # noqa: E402
from pytest_specbench.engine.drafters import PromptLookupDrafter  # noqa: E402
from pytest_specbench.engine.forward_log import ForwardLog  # noqa: E402
from pytest_specbench.engine.plain_generate import plain_generate, plain_generation_config  # noqa: E402


def pair(layers: int, width: int) -> tuple[GPT2LMHeadModel, GPT2LMHeadModel]:
    """A random GPT-2 target and a draft made of its first layer (so the draft agrees now and then)."""
    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=layers, n_embd=width, n_head=max(width // 64, 1), vocab_size=2048, n_positions=1024, pad_token_id=None
    )
    target = GPT2LMHeadModel(config).eval()
    draft = GPT2LMHeadModel(GPT2Config(**{**config.to_dict(), "n_layer": 1})).eval()
    state = {
        key: value
        for key, value in target.state_dict().items()
        if not key.startswith("transformer.h.") or key.startswith("transformer.h.0.")
    }
    draft.load_state_dict(state)
    return target, draft


def prompts(batch: int, seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for row in range(batch):
        length = 24 + 8 * (row % 4)
        if row % 2:  # half the rows repeat themselves, so prompt lookup has something to find
            base = torch.randint(3, 2048, (8,), generator=generator).tolist()
            rows.append((base * 8)[:length])
        else:
            rows.append(torch.randint(3, 2048, (length,), generator=generator).tolist())
    return rows


def timed(function, models) -> tuple[object, float, float]:
    """Run ``function``; return its result, wall time and the time inside ``models``' forward passes."""
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(ForwardLog.attached(model)) for model in models]
        start = time.perf_counter()
        result = function()
        wall = time.perf_counter() - start
    return result, wall, sum(log.seconds for log in logs)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--batches", default="1,4")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    return parser.parse_args()


def contenders(target, draft, ids, mask, config, k: int, n: int) -> dict:
    """``{name: (run, models whose forward passes it makes)}`` for one batch; the unbatched engine at batch 1."""
    lookup = PromptLookupDrafter()
    runs = {
        "generate": (lambda: plain_generate(target, ids, mask, config), [target]),
        "greedy": (lambda: batched_greedy_generate(target, ids, mask, n), [target]),
        "spec_model": (lambda: batched_speculative_generate(target, draft, ids, mask, k, n), [target, draft]),
        "spec_lookup": (lambda: batched_speculative_generate(target, lookup, ids, mask, k, n), [target]),
    }
    if ids.shape[0] == 1:
        # The model's own kernels, as the batched engine's passes run them.
        runs["unbatched_model"] = (
            lambda: speculative_generate(target, draft, ids, k, n, kernels="linear"),
            [target, draft],
        )
    return runs


def race(runs: dict, reference: list[list[int]], prompt_length: int, rounds: int, batch: int) -> dict[str, dict]:
    """Run every contender once per round in a rotating order (round 0 warms up), checking its tokens against
    ``reference``; returns per contender its walls, overhead shares and decode tokens/s."""
    measured: dict[str, dict] = {name: {"wall": [], "overhead": [], "decode_tps": []} for name in runs}
    names = list(runs)
    for round_ in range(rounds + 1):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            function, models = runs[name]
            with torch.inference_mode():
                result, wall, inside = timed(function, models)
            if name == "generate":
                tokens = result[:, prompt_length:].tolist()
            elif name == "unbatched_model":
                tokens = [result.token_ids]
            else:
                tokens = result.token_ids
            assert tokens == reference, f"{name} at batch {batch} is not token-equal to generate"
            if round_ == 0:
                continue
            measured[name]["wall"].append(wall)
            measured[name]["overhead"].append(max(wall - inside, 0.0) / wall)
            if hasattr(result, "stats"):
                measured[name]["decode_tps"].append(result.stats.decode_tokens_per_second)
    return measured


def report(batch: int, measured: dict[str, dict], rounds: int) -> None:
    median = {name: statistics.median(values["wall"]) for name, values in measured.items()}
    print(
        f"batch {batch}: wall (median of {rounds}) "
        + ", ".join(f"{name} {seconds * 1e3:.0f} ms" for name, seconds in median.items())
    )
    print(
        "  overhead share outside forward passes: "
        + ", ".join(
            f"{name} {statistics.median(values['overhead']):.1%}"
            for name, values in measured.items()
            if name != "generate"
        )
    )
    print(f"  batched greedy / generate speed: {median['generate'] / median['greedy']:.2f}x")
    if batch == 1:
        print(f"  batched / unbatched speculative speed: {median['unbatched_model'] / median['spec_model']:.2f}x")
    base = statistics.median(measured["greedy"]["decode_tps"])
    for name in ("spec_model", "spec_lookup"):
        tps = statistics.median(measured[name]["decode_tps"])
        print(f"  {name}: decode {tps:.0f} tok/s vs greedy {base:.0f} tok/s, speedup {tps / base:.2f}x")


def main() -> None:
    args = _arguments()
    target, draft = pair(args.layers, args.width)
    n = args.new_tokens
    for batch in [int(b) for b in args.batches.split(",")]:
        ids, mask = left_pad(prompts(batch))
        config = plain_generation_config(target, n, None)  # the model's own pad id, never a guessed mask
        with torch.inference_mode():
            out = plain_generate(target, ids, mask, config)
        reference = out[:, ids.shape[1] :].tolist()
        runs = contenders(target, draft, ids, mask, config, args.k, n)
        report(batch, race(runs, reference, ids.shape[1], args.rounds, batch), args.rounds)


if __name__ == "__main__":
    main()
