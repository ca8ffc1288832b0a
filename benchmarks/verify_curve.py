"""The verify-cost curve v(m) of a target, per dtype and per kernel form, and v(m)/v(1).

    python benchmarks/verify_curve.py embedded:gemma3-270m --dtype float32,bfloat16 --json curve.json
    python benchmarks/verify_curve.py path/to/checkpoint --m 1,2,3,5,9,17 --repeats 7
    python benchmarks/verify_curve.py --tiny --repeats 1        # a tiny random model: a quick check of the script

v(m) is the median seconds of one target forward pass over m new positions after a prompt, on a
warm KV cache, as a verify pass of m - 1 drafted tokens runs (m = 1: a decode step); it is measured
by the plugin's own probe (``engine.cost_probe.verify_costs``). Each pass's effective bandwidth is
the target's weight bytes over v(m), printed beside this process's memory read bandwidth
(``engine.bandwidth``) as its share. Kernel forms (``--forms``):

- ``own``: the model's own kernels. The hf engine's path is this one: transformers' own forward,
  so it is not timed apart.
- ``engine``: the native engine's forms (``engine.verify_forms``, ``auto``): per layer shape and
  row count (one row included: the greedy baseline's steps), the fastest of the model's own
  ``linear``, the few-rows kernel and (the head) ``weight @ hidden.T``, settled before the rounds.
- ``rows``: the few-rows kernel (``engine.few_rows``) in every layer it serves (float32 on CPU).
- ``column``: the head as ``weight @ hidden.T`` at every row count.

Every round runs each (dtype, form) once, the order rotated from round to round, so drift hits
them alike and ratios compare things run side by side. A sweep's first pass over each m is a
warm-up and is not kept. v(m)/v(1) is the median over rounds of each round's own ratio, with the
lowest and highest of them beside it. Not a test: run it alone, on a quiet machine.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_specbench.engine import few_rows  # noqa: E402
from pytest_specbench.engine.bandwidth import MAX_BUFFER_BYTES, memory_read_gbps, weight_bytes  # noqa: E402
from pytest_specbench.engine.cost_probe import verify_costs  # noqa: E402
from pytest_specbench.engine.kv_cache import cache_length, crop_to, enable_rollback, new_cache  # noqa: E402
from pytest_specbench.engine.native_dtypes import native_dtype_facts, native_dtypes  # noqa: E402
from pytest_specbench.engine.timing import DeviceClock  # noqa: E402
from pytest_specbench.engine.verify_forms import form_choices, verify_forms  # noqa: E402
from pytest_specbench.models.base import DTYPE_NAMES  # noqa: E402

#: form name -> the engine's head kernel (engine/names.py HEAD_KERNELS) it runs under
FORMS: dict[str, str] = {"own": "linear", "engine": "auto", "rows": "rows", "column": "column"}
DEFAULT_POSITIONS = (1, 2, 3, 5, 9, 17)
TINY_TARGET = "tiny:gemma3"
TINY_PROMPT_TOKENS = 24


def _names(raw: str, accepted: Sequence[str], what: str) -> list[str]:
    names = [name.strip() for name in raw.split(",") if name.strip()]
    unknown = [name for name in names if name not in accepted]
    if unknown or not names:
        raise SystemExit(f"--{what}: unknown {', '.join(unknown) or '(empty)'}; accepted: a comma list of {accepted}")
    return list(dict.fromkeys(names))


def _positions(raw: str) -> list[int]:
    try:
        positions = sorted({int(part) for part in raw.split(",") if part.strip()})
    except ValueError:
        positions = []
    if not positions or positions[0] < 1:
        raise SystemExit(f"--m: expected a comma list of positive integers, got {raw!r}")
    return positions if positions[0] == 1 else [1, *positions]  # v(1) is every ratio's denominator


def load_targets(target: str, dtypes: Sequence[str], device: str, prompt: str) -> tuple[dict[str, Any], torch.Tensor]:
    """The target in each dtype, and the prompt's ids (``tiny:gemma3``: a tiny random Gemma 3, fixed ids)."""
    if target == TINY_TARGET:
        from pytest_specbench.testing.tiny_models import tiny_model

        model = tiny_model("gemma3")
        models = {dtype: copy.deepcopy(model).to(device=device, dtype=getattr(torch, dtype)) for dtype in dtypes}
        return models, torch.arange(3, 3 + TINY_PROMPT_TOKENS, device=device).unsqueeze(0)
    from pytest_specbench.measure.inputs import prompt_input_ids
    from pytest_specbench.measure.prompts import load_prompts, select_prompts
    from pytest_specbench.models.loading import load_model

    loaded = {dtype: load_model(target, device=device, dtype=dtype) for dtype in dtypes}
    suite = load_prompts()
    chosen = select_prompts(suite, [prompt], 1)
    if not chosen:
        raise SystemExit(f"--prompt: no prompt of category {prompt!r} in the shipped suite")
    tokenizer = next(iter(loaded.values())).tokenizer
    ids = prompt_input_ids(tokenizer, chosen[0], suite, None, device)
    return {dtype: entry.model for dtype, entry in loaded.items()}, ids


def measure(
    models: dict[str, Any], input_ids: torch.Tensor, forms: Sequence[str], positions: Sequence[int], repeats: int
) -> dict[tuple[str, str], list[list[float]]]:
    """Every round's curve v(1) .. v(max m) per (dtype, form): ``repeats`` rounds, each running every
    (dtype, form) once, order rotated."""
    contenders = [(dtype, form) for dtype in models for form in forms]
    samples: dict[tuple[str, str], list[list[float]]] = {contender: [] for contender in contenders}
    for round_index in range(repeats):
        shift = round_index % len(contenders)
        for dtype, form in contenders[shift:] + contenders[:shift]:
            curve = verify_costs(models[dtype], input_ids, max(positions), repeats=1, head_kernel=FORMS[form])
            samples[dtype, form].append(curve)
    return samples


def one_row_split(model: Any, input_ids: torch.Tensor, form: str, repeats: int = 5) -> dict[str, float]:
    """One decode step split into its linear layers and the rest (medians of ``repeats`` steps): a step
    whose linear layers stream at the memory limit is bounded by what runs between them."""
    linears = [module for module in model.modules() if isinstance(module, torch.nn.Linear)]
    clock, inside, started = DeviceClock(model.device), [0.0], [0.0]
    hooks = [layer.register_forward_pre_hook(lambda *_: started.__setitem__(0, clock.now())) for layer in linears]
    hooks += [
        layer.register_forward_hook(lambda *_: inside.__setitem__(0, inside[0] + clock.now() - started[0]))
        for layer in linears
    ]
    cache = new_cache(model)
    model(input_ids=input_ids, cache=cache, use_cache=True, logits_to_keep=1)
    enable_rollback(cache)
    length = cache_length(cache)
    steps, in_linear = [], []
    try:
        with verify_forms(model, FORMS[form]):
            for repeat in range(repeats + 1):  # the first step warms up and is not kept
                inside[0] = 0.0
                start = clock.now()
                model(input_ids=input_ids[:, -1:], cache=cache, use_cache=True, logits_to_keep=1)
                if repeat:
                    steps.append(clock.now() - start)
                    in_linear.append(inside[0])
                crop_to(cache, length)
    finally:
        for hook in hooks:
            hook.remove()
    linear_bytes = sum(
        layer.weight.numel() * layer.weight.element_size() for layer in {id(x.weight): x for x in linears}.values()
    )
    return {"step_s": statistics.median(steps), "linear_s": statistics.median(in_linear), "linear_bytes": linear_bytes}


def curve_rows(
    samples: dict[tuple[str, str], list[list[float]]],
    positions: Sequence[int],
    nbytes: dict[str, int] | None = None,
    read_gbps: float | None = None,
) -> list[dict[str, Any]]:
    """One row per (dtype, form, m): median v(m); v(m)/v(1) as the median, lowest and highest of the rounds'
    own ratios; median v(m) over float32's median v(m) in the same form; and with the dtypes' weight bytes
    ``nbytes``, the pass's effective bandwidth (GB/s) and its share of ``read_gbps``."""
    medians = {
        contender: {m: statistics.median(curve[m - 1] for curve in curves) for m in positions}
        for contender, curves in samples.items()
    }
    rows = []
    for (dtype, form), curves in samples.items():
        float32 = medians.get(("float32", form))
        for m in positions:
            ratios = [curve[m - 1] / curve[0] for curve in curves]
            rows.append(
                {
                    "dtype": dtype,
                    "form": form,
                    "m": m,
                    "v_s": medians[dtype, form][m],
                    "ratio_to_v1": statistics.median(ratios),
                    "ratio_to_v1_low": min(ratios),
                    "ratio_to_v1_high": max(ratios),
                    "ratio_to_float32": medians[dtype, form][m] / float32[m] if float32 else None,
                    **_bandwidth(nbytes.get(dtype) if nbytes else None, medians[dtype, form][m], read_gbps),
                }
            )
    return rows


def _bandwidth(nbytes: int | None, seconds: float, read_gbps: float | None) -> dict[str, float | None]:
    gbps = nbytes / seconds / 1e9 if nbytes and seconds > 0 else None
    return {"gbps": gbps, "read_share": gbps / read_gbps if gbps and read_gbps else None}


def engine_forms(models: dict[str, Any], max_rows: int) -> dict[str, dict[str, str]]:
    """Per dtype, the engine's settled form of each layer group: ``{"head 151936x1536": "2-9 rows, 10-17 own"}``."""
    described: dict[str, dict[str, str]] = {}
    for dtype, model in models.items():
        layers = {}
        for (shape, _, is_head), by_rows in form_choices(model, "auto", max_rows).items():
            name = f"{'head' if is_head else 'linear'} {'x'.join(map(str, shape))}"
            runs: list[list] = []
            for rows, form in by_rows.items():
                if runs and runs[-1][2] == form:
                    runs[-1][1] = rows
                else:
                    runs.append([rows, rows, form])
            layers[name] = ", ".join(
                f"{low}-{high} {form}" if low < high else f"{low} {form}" for low, high, form in runs
            )
        described[dtype] = layers
    return described


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a text table (milliseconds)."""
    headers = ["dtype", "form", "m", "v(m) ms", "v(m)/v(1)", "rounds' range", "v(m)/v_float32(m)", "GB/s", "of read"]
    body = [
        [
            row["dtype"],
            row["form"],
            row["m"],
            f"{1000 * row['v_s']:.3f}",
            f"{row['ratio_to_v1']:.2f}",
            f"{row['ratio_to_v1_low']:.2f} to {row['ratio_to_v1_high']:.2f}",
            "" if row["ratio_to_float32"] is None else f"{row['ratio_to_float32']:.2f}",
            "" if row.get("gbps") is None else f"{row['gbps']:.1f}",
            "" if row.get("read_share") is None else f"{row['read_share']:.0%}",
        ]
        for row in rows
    ]
    return tabulate(body, headers=headers, disable_numparse=True)


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", help="an embedded name (embedded:gemma3-270m), a checkpoint or hub id")
    parser.add_argument("--tiny", action="store_true", help="a tiny random Gemma 3 built in-process (quick check)")
    parser.add_argument("--dtype", default="float32,bfloat16", help="comma list of dtypes (default float32,bfloat16)")
    parser.add_argument("--forms", default="own,engine", help=f"comma list of kernel forms: {', '.join(FORMS)}")
    parser.add_argument("--m", default=",".join(map(str, DEFAULT_POSITIONS)), help="comma list of m (positions)")
    parser.add_argument("--repeats", type=int, default=7, help="rounds; v(m) is their median")
    parser.add_argument("--prompt", default="list_items", help="prompt category of the shipped suite")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path, help="also write the curves and the machine's facts here")
    args = parser.parse_args(argv)
    if args.tiny == bool(args.target):
        parser.error("give a target or --tiny (not both)")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    return args


@torch.inference_mode()
def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    target = TINY_TARGET if args.tiny else args.target
    dtypes = _names(args.dtype, DTYPE_NAMES, "dtype")
    forms = _names(args.forms, list(FORMS), "forms")
    positions = _positions(args.m)
    native = native_dtypes(args.device)
    print(
        f"{target} on {args.device}: torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}; native dtypes: {', '.join(native)}"
    )
    for dtype in dtypes:
        if dtype not in native:
            print(f"note: {dtype} is not native on {args.device}: its v(m) times an emulation")
    models, input_ids = load_targets(target, dtypes, args.device, args.prompt)
    nbytes = {dtype: weight_bytes(model) for dtype, model in models.items()}
    read_gbps = memory_read_gbps(args.device, max(nbytes.values()))
    samples = measure(models, input_ids, forms, positions, args.repeats)
    read_after = memory_read_gbps(args.device, max(nbytes.values()), fresh=True)
    rows = curve_rows(samples, positions, nbytes, read_gbps)
    print(f"prompt {input_ids.shape[1]} tokens, median of {args.repeats} round(s); form 'own' is also the hf engine's")
    print(
        f"memory read bandwidth {read_gbps:.1f} GB/s before the rounds, {read_after:.1f} after "
        f"(a float32 sum over {min(max(nbytes.values()), MAX_BUFFER_BYTES) / 2**30:.2f} GiB, "
        f"{torch.get_num_threads()} threads); weights: "
        + ", ".join(f"{dtype} {size / 1e9:.2f} GB" for dtype, size in nbytes.items())
    )
    print(table(rows))
    splits = {f"{dtype} {form}": one_row_split(models[dtype], input_ids, form) for dtype in models for form in forms}
    for name, split in splits.items():
        share = split["linear_s"] / split["step_s"]
        gbps = split["linear_bytes"] / split["linear_s"] / 1e9
        print(
            f"one-row step, {name}: {1000 * split['step_s']:.1f} ms, {share:.0%} of it in linear layers, which "
            f"stream their {split['linear_bytes'] / 1e9:.2f} GB at {gbps:.1f} GB/s ({gbps / read_gbps:.0%} of read)"
        )
    chosen = engine_forms(models, max(positions)) if "engine" in forms else {}
    for dtype, layers in chosen.items():
        print(f"engine forms, {dtype}: " + "; ".join(f"{layer}: {forms_text}" for layer, forms_text in layers.items()))
    if few_rows.unavailable_reason():
        print(f"note: {few_rows.unavailable_reason()}")
    if args.json:
        document = {
            "target": target,
            "device": args.device,
            "prompt_tokens": int(input_ids.shape[1]),
            "repeats": args.repeats,
            "native_dtypes": list(native),
            "native_dtype_facts": native_dtype_facts(args.device),
            "threads": torch.get_num_threads(),
            "memory_read_gbps": read_gbps,
            "memory_read_gbps_after": read_after,
            "weight_bytes": nbytes,
            "curves": rows,
            "engine_forms": chosen,
            "one_row_split": splits,
            "few_rows_kernel": few_rows.unavailable_reason() or "built",
        }
        args.json.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
