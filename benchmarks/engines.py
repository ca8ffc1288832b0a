"""This package's engine against transformers' assisted generation, measured interleaved in one process.

    python benchmarks/engines.py --out engines.json

For each pair and prompt it runs, round after round in a rotating order (so drift in machine load
hits every contestant alike): target-only ``greedy_generate``, transformers' ``generate(do_sample=
False)``, and at each k both engines (``native`` = ``speculative_generate``, ``hf`` = ``generate``
with the assistant or prompt lookup) and the native engine with the model's own output head, plus ``native``
at k=auto (the cost-model schedule) and
``hf`` at its default schedule. Every run's tokens must equal ``generate``'s. It prints and writes:

(a) greedy_generate / generate: the baseline is not a straw man (target >= 0.98x);
(b) native / hf at equal constant k, geometric mean over prompts and k (target >= 1.15x);
(c) native k=auto / hf's default schedule (target >= 1.10x; transformers' prompt lookup has none);
(d) engine overhead: the native run's wall time outside the target's and the draft's forward
    passes, as a share of the wall time (target < 5% on the GPT-2-sized pair);
(e) efficiency: measured decode speedup / the cost model's prediction (engine/cost_model.py);
(f) what the output head buys: native / native with the model's own head (``kernels="linear"``)
    at equal k, the verify pass's head otherwise computed in the measured-faster form
    (kernels/verify_forms.py: one ``KernelForms`` per target, settled by the cost probe before the rounds).

Ratios are speeds (> 1: the first is faster), geometric means of the per-round ratios with a 95%
t-interval on their logs. Pairs: ``gpt2_random`` (a random 12-layer GPT-2-sized target and a 2-layer
draft cut from it; nothing downloaded) and the embedded Gemma 3 270M pairs ``gemma3_int8`` and
``gemma3_pld`` (skipped when the embedded package is not installed). Not a test: run it on a quiet
machine; a full run on a CPU takes long (``--rounds 1 --ks 4`` is shorter).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_specbench.engine.cost_model import alpha_mle, predicted_speedup  # noqa: E402
from pytest_specbench.engine.cost_probe import draft_token_cost, verify_costs  # noqa: E402
from pytest_specbench.engine.decoding import greedy_generate, speculative_generate  # noqa: E402
from pytest_specbench.engine.derived_models import int8_copy, truncated_copy  # noqa: E402
from pytest_specbench.engine.drafters import ModelDrafter, PromptLookupDrafter  # noqa: E402
from pytest_specbench.engine.forward_log import ForwardLog  # noqa: E402
from pytest_specbench.engine.hf_assisted import hf_assisted_generate  # noqa: E402
from pytest_specbench.engine.schedules import CostModelSchedule  # noqa: E402
from pytest_specbench.kernels.verify_forms import KernelForms  # noqa: E402
from pytest_specbench.measure.verdicts import reference_tokens  # noqa: E402
from pytest_specbench.results.statistics import speedup_interval  # noqa: E402

TARGETS = {"baseline / generate": 0.98, "native / hf, constant k": 1.15, "native auto / hf default": 1.10}
MAX_OVERHEAD = 0.05


def gpt2_random(prompt_categories: list[str], prompt_tokens: int = 48):
    """A random GPT2Config() model (12 layers, 768 wide) and its first 2 layers; seeded token prompts."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    target = GPT2LMHeadModel(GPT2Config()).eval()
    generator = torch.Generator().manual_seed(0)
    prompts = {
        category: torch.randint(0, target.config.vocab_size, (1, prompt_tokens), generator=generator)
        for category in prompt_categories
    }
    return target, ModelDrafter(truncated_copy(target, 2)), prompts


def gemma_pairs(prompt_categories: list[str], names: list[str]):
    from pytest_specbench.cases.prompts import load_prompts, select_prompts
    from pytest_specbench.measure.inputs import prompt_input_ids
    from pytest_specbench.models.loading import load_model

    loaded = load_model("embedded:gemma3-270m")
    suite = load_prompts()
    prompts = {
        prompt.category: prompt_input_ids(loaded.tokenizer, prompt, suite, None, "cpu")
        for prompt in select_prompts(suite, prompt_categories, 1)
    }
    drafters = {
        "gemma3_int8": lambda: ModelDrafter(int8_copy(loaded.model)),
        "gemma3_pld": lambda: PromptLookupDrafter(3),
    }
    return {name: (loaded.model, drafters[name](), prompts) for name in names if name in drafters}


def run_logged(run: Callable[[], object], models: list[torch.nn.Module]):
    """Run once with forward logs on ``models``; returns (result, wall seconds, seconds inside their passes)."""
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(ForwardLog.attached(model)) for model in models]
        start = time.perf_counter()
        result = run()
        wall = time.perf_counter() - start
    return result, wall, sum(log.seconds for log in logs)


def measure_pair(name: str, target, drafter, prompts: dict, ks: list[int], new_tokens: int, rounds: int) -> dict:
    draft_model = getattr(drafter, "model", None)
    models = [target] + ([draft_model] if draft_model is not None else [])
    record: dict = {"pair": name, "prompts": {}}
    forms = KernelForms(target)  # the target's forms, settled by the first curve, run by every native contestant
    for category, ids in prompts.items():
        reference = reference_tokens(target, ids, new_tokens, None)
        curve = verify_costs(target, ids, max(max(ks), 16) + 1, kernels=forms)
        cost_ratio = draft_token_cost(drafter, ids) / curve[0]
        auto = CostModelSchedule.tuned(curve, cost_ratio, confidence_stop=True)
        contestants: dict[str, Callable[[], object]] = {
            "greedy": lambda: greedy_generate(target, ids, new_tokens, kernels=forms),
            "generate": lambda: reference_tokens(target, ids, new_tokens, None),
        }
        for k in ks:
            contestants[f"native k{k}"] = lambda k=k: speculative_generate(
                target, drafter, ids, k, new_tokens, kernels=forms
            )
            contestants[f"hf k{k}"] = lambda k=k: hf_assisted_generate(target, drafter, ids, k, new_tokens)
            contestants[f"native k{k} linear head"] = lambda k=k: speculative_generate(
                target, drafter, ids, k, new_tokens, kernels="linear"
            )
        contestants["native auto"] = lambda: speculative_generate(target, drafter, ids, auto, new_tokens, kernels=forms)
        if draft_model is not None:
            contestants["hf auto"] = lambda: hf_assisted_generate(target, drafter, ids, "auto", new_tokens)
        for run in contestants.values():  # warm-up, untimed
            run()
        runs: dict[str, list[dict]] = {label: [] for label in contestants}
        labels = list(contestants)
        for round_index in range(rounds):
            shift = round_index % len(labels)
            for label in labels[shift:] + labels[:shift]:
                result, wall, inside = run_logged(contestants[label], models)
                tokens = result if isinstance(result, list) else result.token_ids
                assert tokens == reference, f"{name} {category} {label}: output differs from generate's"
                entry = {"wall_s": wall, "inside_forward_s": inside}
                if not isinstance(result, list):
                    stats = result.stats
                    entry.update(
                        per_decode_token_s=stats.time_per_decode_token_s,
                        drafted_per_step=stats.drafted_per_step,
                        accepted_per_step=stats.accepted_per_step,
                        k_per_step=stats.k_per_step,
                    )
                runs[label].append(entry)
            print(f"  {name} {category}: round {round_index + 1}/{rounds} done", flush=True)
        record["prompts"][category] = {
            "verify_costs_s": curve,
            "cost_ratio": cost_ratio,
            "runs": runs,
            "column_head_rows": forms.column_head_rows(len(curve)),
        }
    return record


def ratio(records: list[dict], faster: str, slower: str) -> dict | None:
    """Speed of ``faster`` over ``slower``: pooled paired rounds over every prompt of the records."""
    return pooled_ratio(records, [(faster, slower)])


def equal_k_ratio(records: list[dict], ks: list[int]) -> dict | None:
    """Speed of the native engine over hf, paired at each equal k, pooled over k and prompts."""
    return pooled_ratio(records, [(f"native k{k}", f"hf k{k}") for k in ks])


def pooled_ratio(records: list[dict], label_pairs: list[tuple[str, str]]) -> dict | None:
    fast, slow = [], []
    for faster, slower in label_pairs:
        for record in records:
            for prompt in record["prompts"].values():
                runs = prompt["runs"]
                if faster in runs and slower in runs:
                    fast += [run["wall_s"] for run in runs[faster]]
                    slow += [run["wall_s"] for run in runs[slower]]
    if not fast:
        return None
    interval = speedup_interval(slow, fast, paired=True)
    return {"ratio": interval.estimate, "ci_low": interval.low, "ci_high": interval.high, "rounds": len(fast)}


def overhead_and_efficiency(record: dict, ks: list[int]) -> dict:
    shares, efficiencies = {}, {}
    for k in ks:
        label = f"native k{k}"
        share, eff = [], []
        for prompt in record["prompts"].values():
            runs = prompt["runs"]
            share += [1 - run["inside_forward_s"] / run["wall_s"] for run in runs[label]]
            alpha = alpha_mle(runs[label][0]["drafted_per_step"], runs[label][0]["accepted_per_step"])
            if alpha is not None:
                measured = statistics.median(
                    base["per_decode_token_s"] / spec["per_decode_token_s"]
                    for base, spec in zip(runs["greedy"], runs[label])
                )
                eff.append(measured / predicted_speedup(alpha, k, prompt["cost_ratio"], prompt["verify_costs_s"]))
        shares[k] = statistics.median(share)
        efficiencies[k] = statistics.median(eff) if eff else None
    return {"overhead_share": shares, "efficiency": efficiencies}


def _show(label: str, value: dict | None, target: float | None = None) -> str:
    if value is None:
        return f"{label}: not measured"
    verdict = (
        ""
        if target is None
        else (
            "  (target >= {:.2f}: {})".format(
                target, "met" if value["ratio"] >= target else f"missed by {target - value['ratio']:.2f}"
            )
        )
    )
    spread = "(one run: no interval)" if value["ci_low"] is None else f"[{value['ci_low']:.3f}, {value['ci_high']:.3f}]"
    return f"{label}: {value['ratio']:.3f} {spread} over {value['rounds']} paired runs{verdict}"


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default="gpt2_random,gemma3_int8,gemma3_pld")
    parser.add_argument("--ks", default="2,4,8")
    parser.add_argument("--prompts", default="natural,code_python,repetitive,list_items")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default="engines.json")
    return parser.parse_args(argv)


def load_pairs(names: list[str], categories: list[str]) -> dict:
    """The pairs named, as ``{name: (target, drafter, prompts)}``; the embedded Gemma pairs only when installed."""
    pairs = {}
    if "gpt2_random" in names:
        pairs["gpt2_random"] = gpt2_random(categories)
    gemma = [name for name in names if name.startswith("gemma3")]
    if gemma:
        try:
            pairs.update(gemma_pairs(categories, gemma))
        except Exception as error:  # the embedded model is optional here
            print(f"embedded Gemma pairs skipped: {error}")
    return pairs


def summarise_pair(record: dict, ks: list[int]) -> dict:
    """One pair's ratios (a, b, c and f of the module docstring), overhead shares and efficiencies."""
    return {
        "baseline / generate": ratio([record], "greedy", "generate"),
        "native / hf, constant k": equal_k_ratio([record], ks),
        "native auto / hf default": ratio([record], "native auto", "hf auto"),
        "native / native with linear head": pooled_ratio(
            [record], [(f"native k{k}", f"native k{k} linear head") for k in ks]
        ),
        **overhead_and_efficiency(record, ks),
    }


def print_pair(record: dict, found: dict, ks: list[int]) -> None:
    name = record["pair"]
    print(f"{name}:")
    for label, target in TARGETS.items():
        print("  " + _show(label, found[label], target))
    for k in ks:
        print(f"  native / hf at k={k}: {_show('', ratio([record], f'native k{k}', f'hf k{k}'))[2:]}")
    print(
        "  "
        + _show(
            "native / native with the model's own output head (what the head buys)",
            found["native / native with linear head"],
        )
    )
    rows = sorted({row for prompt in record["prompts"].values() for row in prompt["column_head_rows"]})
    print(f"  verify blocks (rows) whose head ran as weight @ hidden.T: {rows or 'none'}")
    print(
        "  native k=auto over native at each constant k: "
        + ", ".join(
            f"k={k} {_show('', ratio([record], 'native auto', f'native k{k}'))[2:].split(' over')[0]}" for k in ks
        )
    )
    shares = found["overhead_share"]
    print(
        "  engine overhead (share of wall time outside forward passes), by k: "
        + ", ".join(f"k={k} {share:.1%}" for k, share in shares.items())
        + ("" if name != "gpt2_random" else f"  (target < {MAX_OVERHEAD:.0%})")
    )
    print(
        "  efficiency (measured / predicted decode speedup), by k: "
        + ", ".join(f"k={k} {eff:.2f}" if eff is not None else f"k={k} -" for k, eff in found["efficiency"].items())
    )


def summarise_embedded(records: list[dict], ks: list[int]) -> dict | None:
    """The embedded pairs' ratios pooled together, printed; ``None`` when none ran."""
    embedded = [record for record in records if record["pair"].startswith("gemma3")]
    if not embedded:
        return None
    together = {
        "native / hf, constant k": equal_k_ratio(embedded, ks),
        "native auto / hf default": ratio(embedded, "native auto", "hf auto"),
    }
    print("embedded pairs together:")
    for label, value in together.items():
        print("  " + _show(label, value, TARGETS[label]))
    return together


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    ks = [int(k) for k in args.ks.split(",")]
    categories = args.prompts.split(",")
    print(
        f"{platform.processor() or platform.machine()}, torch {torch.__version__} "
        f"(CPU capability {torch.backends.cpu.get_cpu_capability()}), {torch.get_num_threads()} threads; "
        f"k {ks}, {args.new_tokens} new tokens, {args.rounds} rounds",
        flush=True,
    )
    pairs = load_pairs(args.pairs.split(","), categories)
    start = time.perf_counter()
    records = []
    for name, (target, drafter, prompts) in pairs.items():
        records.append(measure_pair(name, target, drafter, prompts, ks, args.new_tokens, args.rounds))
    summary: dict = {"per_pair": {}}
    print()
    for record in records:
        summary["per_pair"][record["pair"]] = found = summarise_pair(record, ks)
        print_pair(record, found, ks)
    embedded = summarise_embedded(records, ks)
    if embedded is not None:
        summary["embedded"] = embedded
    print(f"all outputs equal generate's: yes; {time.perf_counter() - start:.0f} s")
    Path(args.out).write_text(
        json.dumps({"args": vars(args), "summary": summary, "records": records}, indent=1, default=str) + "\n",
        encoding="utf-8",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
