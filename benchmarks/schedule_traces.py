"""Tune draft-length schedules offline: record acceptance traces once (untimed), then simulate any schedule.

A greedy speculative run commits the target's own greedy tokens whatever the schedule, so what a drafter
would propose at each position of that continuation is fixed by the text alone. ``record`` stores it per
prompt: the target's greedy continuation and, at every position p (the committed prefix being the prompt plus
the continuation's first p tokens),

- for a draft model (``gemma3_int8``): how many of its greedy tokens in a row match the continuation
  (``match``, up to ``--max-draft``) and after how many tokens its confidence stop (top probability below
  0.4, as the engine's) would end a block (``stop``);
- for prompt lookup (``gemma3_pld``): how many tokens the lookup would propose (``available``) and how many of
  them match (``match``).

``simulate`` replays the engine's loop over a trace with any schedule (a constant k or a
:class:`~pytest_specbench.engine.schedules.DraftSchedule`) against a cost model: the verify-cost curve v(m)
and the draft cost c of a recorded row (``verify_costs_ms``, ``cost_ratio``; default ``docs/default_run.json``,
the pair's first row), a step costing v(d + 1) + d c v(1) for d drafted tokens and a plain step v(1). It prints
the predicted decode time per token (in v(1)) of each schedule, of every constant k in 1, 2, 4, 8, 16 and of the
best of them per prompt (chosen after the fact, as the answer table does), and the geometric means per
category and over a set of categories. No clock is read anywhere: this is safe beside timed runs, and it
predicts; only a run measures.

    python benchmarks/schedule_traces.py record --out traces.json --per-category 3 \
        --categories technical,code,wikipedia_style,creative_fiction,technical_ml,dialogue,code_json,repetitive_pattern
    python benchmarks/schedule_traces.py simulate traces.json              # the tuning set
    python benchmarks/schedule_traces.py simulate traces.json --held-out   # dialogue, code_json, repetitive_pattern
    python benchmarks/schedule_traces.py simulate traces.json --overhead 0.1 --curve 1.0,1.1,... --cost-ratio 0.4

The setting of k=auto (:meth:`~pytest_specbench.engine.schedules.CostModelSchedule.tuned`) was chosen with this
tool on a tuning set of categories and checked on held-out ones simulated only once it was fixed; the categories,
the grid and the figures are in docs/results/2026-12-01-kauto-held-out-tuned.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: held out from tuning, reported apart (the tuning set is every other category recorded)
HELD_OUT = ("dialogue", "code_json", "repetitive_pattern")
CONSTANT_KS = (1, 2, 4, 8, 16)
CONFIDENCE = 0.4
#: the confidence stops recorded (``stops``; ``stop`` is CONFIDENCE's): a schedule may choose its threshold
THRESHOLDS = (0.2, 0.3, 0.4)


# --- record -------------------------------------------------------------------------------------


def _model_trace(model, prompt_ids, continuation: list[int], max_draft: int) -> tuple[list, dict]:
    """Per position p: the draft model's greedy tokens from prompt + continuation[:p]: how many match, and per
    threshold of THRESHOLDS after how many its confidence stop would end a block.

    Greedy drafting is a function of the prefix, so where the draft's first token equals the continuation's,
    its tokens from p + 1 are its tokens from p shifted by one: one run of draft tokens serves every position it
    matches, and the cache is rolled back only at a miss (a few draft passes per position instead of up to
    ``max_draft``).
    """
    import torch

    from pytest_specbench.engine.kv_cache import crop_to, enable_rollback, new_cache

    cache = new_cache(model)
    enable_rollback(cache)

    def feed(tokens: list[int]) -> torch.Tensor:
        logits = model(
            input_ids=torch.tensor([tokens], dtype=torch.long), cache=cache, use_cache=True, logits_to_keep=1
        ).logits
        return logits[0, -1].float().softmax(-1)

    probs = feed(prompt_ids[0].tolist())
    committed = prompt_ids.shape[1]  # the cache holds the committed prefix, then the run's tokens but its last
    run: list[int] = []  # the draft's greedy tokens from the committed prefix on
    confidence: list[float] = []  # each one's probability
    matches: list[int] = []
    stops: dict[float, list[int]] = {threshold: [] for threshold in THRESHOLDS}
    n = len(continuation)
    for p in range(n):
        limit = min(max_draft, n - p - 1)
        # Extend the run until it holds the first miss and the confidence stop, or the longest block.
        while len(run) < limit:
            known_miss = any(token != continuation[p + i] for i, token in enumerate(run))
            known_stop = any(c < min(THRESHOLDS) for c in confidence)
            if known_miss and known_stop:
                break
            token = int(probs.argmax())
            run.append(token)
            confidence.append(float(probs.max()))
            probs = feed([token])
        match = 0
        while match < min(len(run), limit) and run[match] == continuation[p + match]:
            match += 1
        matches.append(match if limit > 0 else 0)
        for threshold in THRESHOLDS:
            stop = next((i + 1 for i, c in enumerate(confidence[:limit]) if c < threshold), limit)
            stops[threshold].append(stop if limit > 0 else 0)
        # Commit the continuation's token p.
        if run and run[0] == continuation[p]:
            run, confidence = run[1:], confidence[1:]
            committed += 1
        else:
            crop_to(cache, committed)
            probs = feed([continuation[p]])
            committed += 1
            run, confidence = [], []
    return matches, stops


def _lookup_trace(drafter, committed, continuation: list[int], max_draft: int) -> tuple[list, list]:
    import torch

    matches, available = [], []
    for p in range(len(continuation)):
        prefix = torch.cat([committed, torch.tensor([continuation[:p]], dtype=torch.long)], dim=1)
        limit = min(max_draft, len(continuation) - p - 1)
        proposal = drafter.propose(prefix, limit).tolist() if limit >= 1 else []
        match = 0
        for i, token in enumerate(proposal):
            if token != continuation[p + i]:
                break
            match += 1
        matches.append(match)
        available.append(len(proposal))
    return matches, available


def record(
    out: str,
    categories: Sequence[str] | None,
    per_category: int | None,
    new_tokens: int,
    max_draft: int,
    pairs: Sequence[str],
) -> None:
    import torch

    from pytest_specbench.cases.pairs import BUILTIN_PAIRS
    from pytest_specbench.cases.prompts import load_prompts, select_prompts
    from pytest_specbench.engine.decoding import greedy_generate
    from pytest_specbench.engine.derived_models import int8_copy
    from pytest_specbench.engine.drafters import PromptLookupDrafter
    from pytest_specbench.measure.inputs import prompt_input_ids
    from pytest_specbench.models.loading import load_model

    torch.manual_seed(0)
    loaded = load_model("embedded:gemma3-270m")
    prompts = load_prompts()
    document: dict[str, Any] = {"new_tokens": new_tokens, "max_draft": max_draft, "prompts": []}
    int8 = int8_copy(loaded.model) if "gemma3_int8" in pairs else None
    lookup = PromptLookupDrafter(**BUILTIN_PAIRS["gemma3_pld"].options)
    with torch.inference_mode():
        for prompt in select_prompts(prompts, categories, per_category):
            ids = prompt_input_ids(loaded.tokenizer, prompt, prompts, None, "cpu")
            continuation = greedy_generate(loaded.model, ids, new_tokens).token_ids
            entry: dict[str, Any] = {"id": prompt.id, "category": prompt.category, "continuation": continuation}
            if "gemma3_pld" in pairs:
                match, available = _lookup_trace(lookup, ids, continuation, max_draft)
                entry["gemma3_pld"] = {"match": match, "available": available}
            if int8 is not None:
                # Position 0 is the prefill's token: simulations start at position 1.
                match, stops = _model_trace(int8, ids, continuation, max_draft)
                entry["gemma3_int8"] = {
                    "match": match,
                    "stop": stops[CONFIDENCE],
                    "stops": {str(t): stop for t, stop in stops.items()},
                }
            document["prompts"].append(entry)
            print(
                f"{prompt.id}: "
                + ", ".join(
                    f"{pair} mean match {sum(entry[pair]['match']) / new_tokens:.2f}" for pair in pairs if pair in entry
                ),
                flush=True,
            )
            Path(out).write_text(json.dumps(document), encoding="utf-8")  # partial traces survive an interruption


# --- simulate -----------------------------------------------------------------------------------


def simulate(
    trace: dict[str, Any],
    schedule: Any,
    costs: Sequence[float],
    cost_ratio: float,
    threshold: bool | None = None,
    step_overhead: float = 0.0,
    catch_up_ratio: float | None = None,
    warmups: int = 1,
) -> dict[str, float]:
    """Replay the engine's loop over one prompt's trace of one pair; the time is in units of v(1).

    ``schedule``: an int (a constant k) or a DraftSchedule. ``threshold``: whether a model draft's confidence
    stop applies (default: when the schedule has a confidence_threshold). ``step_overhead``: a step's fixed
    cost beside its passes, in v(1); ``catch_up_ratio``: a draft pass over two tokens (after a block accepted
    whole) over v(1), None for c. ``warmups``: generations the same schedule object runs first, as the
    plugin's warm-up does (a schedule may keep what it learnt across ``reset``). Returns time per decode token,
    the predicted decode speedup (v(1) per token over it), and the steps of the last generation.
    """
    from pytest_specbench.engine.schedules import ConstantSchedule, DraftSchedule

    if not isinstance(schedule, DraftSchedule):
        schedule = ConstantSchedule(schedule)
    for _ in range(warmups):
        _generation(trace, schedule, costs, cost_ratio, threshold, step_overhead, catch_up_ratio)
    return _generation(trace, schedule, costs, cost_ratio, threshold, step_overhead, catch_up_ratio)


def _generation(
    trace: dict[str, Any],
    schedule: Any,
    costs: Sequence[float],
    cost_ratio: float,
    threshold: bool | None,
    step_overhead: float,
    catch_up_ratio: float | None,
) -> dict[str, float]:
    schedule.reset()
    if threshold is None:
        threshold = schedule.confidence_threshold is not None
    match = trace["match"]
    lookup = "available" in trace
    cap = trace["available"] if lookup else trace["stop"]
    chosen = getattr(schedule, "confidence_threshold", None)
    if not lookup and chosen is not None and chosen != CONFIDENCE:
        if str(chosen) not in trace.get("stops", {}):
            raise ValueError(f"the trace has no confidence stop recorded at {chosen}")
        cap = trace["stops"][str(chosen)]
    n = len(match)
    v1 = costs[0]
    extra = 0.0 if catch_up_ratio is None or lookup else catch_up_ratio - cost_ratio
    p, time, steps, whole = 1, 0.0, 0, False  # position 0 is the prefill's token
    while p < n:
        k = schedule.next_k()
        block = min(k, n - p - 1, len(costs) - 1)
        if lookup:
            drafted = min(block, cap[p])
        else:
            drafted = min(block, cap[p]) if threshold else block
        accepted = min(match[p], drafted)
        time += step_overhead + (
            1.0 if drafted == 0 else costs[drafted] / v1 + drafted * cost_ratio + (extra if whole else 0.0)
        )
        whole = drafted > 0 and accepted == drafted  # the draft feeds two tokens next time
        schedule.update(drafted, accepted)
        p += accepted + 1
        steps += 1
    tokens = n - 1
    per_token = time / tokens
    return {"time_per_token": per_token, "speedup": 1.0 / per_token, "steps": steps}


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def cost_inputs(results: str, pair: str) -> tuple[list[float], float]:
    """v(m) and c of a pair's first row in a run's JSON document, its rows read typed."""
    from pytest_specbench.cli import load_run, run_results

    row = next(row for row in run_results(load_run(Path(results))) if row.pair == pair and row.verify_costs_ms)
    return row.verify_costs_ms, row.cost_ratio


def schedules_by_name(costs: Sequence[float], cost_ratio: float) -> dict[str, Callable[[], Any]]:
    """The schedules ``simulate --schedules`` knows by name. ``hf_default`` stands for transformers' default
    (the hf engine's k=auto: 20 tokens, constant, confidence threshold 0.4), here capped at the curve's
    longest block; only the schedule is simulated, not that engine's own costs per step."""
    from pytest_specbench.engine.schedules import ConstantSchedule, CostModelSchedule, HeuristicSchedule

    class HfDefault(ConstantSchedule):
        confidence_threshold = CONFIDENCE

    longest = len(costs) - 1

    return {
        "auto": lambda: CostModelSchedule.tuned(costs, cost_ratio, confidence_stop=True),
        "heuristic": lambda: HeuristicSchedule(),
        # for comparison: the constructor's generic rule (what a draft model under sampling gets), and that rule
        # with a weaker prior (0.6 worth half an observation)
        "auto_generic": lambda: CostModelSchedule(costs, cost_ratio),
        "auto_before": lambda: CostModelSchedule(
            costs, cost_ratio, prior_alpha=0.6, prior_weight=0.5, grow=False, unsure_weight=1.0
        ),
        "hf_default": lambda: HfDefault(min(20, longest)),
    }


def evaluate(
    traces: dict[str, Any],
    pair: str,
    categories: Sequence[str],
    costs: Sequence[float],
    cost_ratio: float,
    names: Sequence[str] = ("auto",),
    make: dict | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Per prompt of ``categories``: each schedule's and each constant k's predicted speedup, the best constant
    k's, and each schedule's ratio to it; per category and over all, geometric means of the ratios."""
    make = make or schedules_by_name(costs, cost_ratio)
    prompts = [entry for entry in traces["prompts"] if entry["category"] in categories and pair in entry]
    per_prompt = []
    for entry in prompts:
        trace = entry[pair]
        constant = {k: simulate(trace, k, costs, cost_ratio, **options)["speedup"] for k in CONSTANT_KS}
        best_k = max(constant, key=constant.get)
        scheduled = {name: simulate(trace, make[name](), costs, cost_ratio, **options)["speedup"] for name in names}
        per_prompt.append(
            {
                "id": entry["id"],
                "category": entry["category"],
                "constant": constant,
                "best_k": best_k,
                "best": constant[best_k],
                "schedules": scheduled,
                "ratio": {name: s / constant[best_k] for name, s in scheduled.items()},
            }
        )
    summary = {name: _geomean([item["ratio"][name] for item in per_prompt]) for name in names} if per_prompt else {}
    by_category = {
        category: {
            name: _geomean([item["ratio"][name] for item in per_prompt if item["category"] == category])
            for name in names
        }
        for category in dict.fromkeys(item["category"] for item in per_prompt)
    }
    # The best single constant k over the set, as a user who sweeps once and then fixes k would pick.
    fixed = (
        {k: _geomean([item["constant"][k] / item["best"] for item in per_prompt]) for k in CONSTANT_KS}
        if per_prompt
        else {}
    )
    return {"prompts": per_prompt, "ratio": summary, "by_category": by_category, "fixed_k_ratio": fixed}


def _print(result: dict[str, Any], pair: str, label: str, verbose: bool) -> None:
    print(f"== {pair}, {label}: {len(result['prompts'])} prompts")
    if verbose:
        for item in result["prompts"]:
            print(
                f"  {item['id']:<24} best k={item['best_k']:<2} {item['best']:.3f}  "
                + "  ".join(f"{name} {s:.3f} ({item['ratio'][name]:.3f})" for name, s in item["schedules"].items())
                + "  | "
                + " ".join(f"k{k}:{s:.2f}" for k, s in item["constant"].items())
            )
    for category, ratios in result["by_category"].items():
        print(f"  {category:<20} " + "  ".join(f"{name} / best k: {r:.3f}" for name, r in ratios.items()))
    print(
        "  geometric mean over prompts: "
        + "  ".join(f"{name} / best k: {r:.3f}" for name, r in result["ratio"].items())
    )
    if "auto" in result["ratio"] and "hf_default" in result["ratio"]:
        ratio = result["ratio"]["auto"] / result["ratio"]["hf_default"]
        print(f"  auto / hf_default (decode, schedule only): {ratio:.3f}")
    print(
        "  a single constant k for all (/ per-prompt best): "
        + "  ".join(f"k={k} {r:.3f}" for k, r in result["fixed_k_ratio"].items())
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="record the traces (untimed model runs)")
    rec.add_argument("--out", required=True)
    rec.add_argument("--categories", default=None, help="comma-separated (default: every shipped category)")
    rec.add_argument("--per-category", type=int, default=None)
    rec.add_argument("--new-tokens", type=int, default=32)
    rec.add_argument("--max-draft", type=int, default=16)
    rec.add_argument("--pairs", default="gemma3_int8,gemma3_pld")
    sim = commands.add_parser("simulate", help="simulate schedules over recorded traces")
    sim.add_argument("traces")
    sim.add_argument(
        "--results",
        default=str(ROOT / "docs" / "default_run.json"),
        help="a run's JSON document whose first row per pair gives v(m) and c",
    )
    sim.add_argument("--pairs", default="gemma3_int8,gemma3_pld")
    sim.add_argument(
        "--categories",
        default=None,
        help="comma-separated (default: the tuning set: every category recorded but the held-out ones)",
    )
    sim.add_argument("--held-out", action="store_true", help="report on the held-out categories")
    sim.add_argument("--schedules", default="auto,auto_generic,heuristic,hf_default")
    sim.add_argument(
        "--curve",
        default=None,
        help="v(m)/v(1) for m = 1, 2, ... (comma-separated) in place of the "
        "recorded row's; applies to every pair given",
    )
    sim.add_argument("--cost-ratio", type=float, default=None, help="c in place of the recorded row's")
    sim.add_argument("--overhead", type=float, default=0.0, help="a step's fixed cost, in v(1)")
    sim.add_argument("--warmups", type=int, default=1, help="generations before the one measured (as the plugin)")
    sim.add_argument("-v", "--verbose", action="store_true")
    return parser


def _simulate_command(args: argparse.Namespace) -> None:
    """``simulate``: evaluate the schedules named on the chosen categories of each pair and print the result."""
    traces = json.loads(Path(args.traces).read_text(encoding="utf-8"))
    recorded = list(dict.fromkeys(entry["category"] for entry in traces["prompts"]))
    if args.categories:
        categories, label = args.categories.split(","), "categories " + args.categories
    elif args.held_out:
        categories, label = list(HELD_OUT), "held out: " + ", ".join(HELD_OUT)
    else:
        categories = [c for c in recorded if c not in HELD_OUT]
        label = "tuning set: " + ", ".join(categories)
    for pair in args.pairs.split(","):
        costs, cost_ratio = cost_inputs(args.results, pair)
        if args.curve:
            costs = [float(v) for v in args.curve.split(",")]
        if args.cost_ratio is not None:
            cost_ratio = args.cost_ratio
        names = [name for name in args.schedules.split(",") if name]
        if pair == "gemma3_pld":  # transformers has no schedule for prompt lookup
            names = [name for name in names if name not in ("heuristic", "hf_default")]
        result = evaluate(
            traces, pair, categories, costs, cost_ratio, names, step_overhead=args.overhead, warmups=args.warmups
        )
        _print(
            result,
            pair,
            f"{label}; c = {cost_ratio:.3f}, v(m)/v(1) = " + ", ".join(f"{v / costs[0]:.2f}" for v in costs),
            args.verbose,
        )


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.command == "record":
        categories = args.categories.split(",") if args.categories else None
        record(args.out, categories, args.per_category, args.new_tokens, args.max_draft, args.pairs.split(","))
    else:
        _simulate_command(args)


if __name__ == "__main__":
    main()
