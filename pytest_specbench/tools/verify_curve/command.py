"""The verify-cost curve v(m) of a target, per dtype and per kernel form, and v(m)/v(1).

    python -m pytest_specbench verify-curve embedded:gemma3-270m --dtype float32,bfloat16 --json curve.json
    python -m pytest_specbench verify-curve path/to/checkpoint --m 1,2,3,5,9,17 --repeats 7
    python -m pytest_specbench verify-curve --tiny --repeats 1     # a tiny random model: a quick check of the tool
    python -m pytest_specbench verify-curve embedded:qwen2.5-coder-1.5b --draft embedded:qwen2.5-coder-0.5b

v(m) is the median seconds of one target forward pass over m new positions after a prompt, on a
warm KV cache, as a verify pass of m - 1 drafted tokens runs (m = 1: a decode step); it is measured
by the plugin's own probe (``engine.cost_probe.verify_costs``). Each pass's effective bandwidth is
the target's weight bytes over v(m), printed beside this process's memory read bandwidth
(``kernels.bandwidth``) as its share. Kernel forms (``--forms``):

- ``own``: the model's own kernels. The hf engine's path is this one: transformers' own forward,
  so it is not timed apart.
- ``engine``: the native engine's forms (``kernels.verify_forms``, ``auto``): per layer shape and
  row count (one row included: the greedy baseline's steps), the fastest of the model's own
  ``linear``, the few-rows kernel and (the head) ``weight @ hidden.T``, settled before the rounds
  (one ``KernelForms`` per dtype's model and form, kept for every round and the splits below).
- ``rows``: the few-rows kernel (``kernels.few_rows``) in every layer it serves (float32 on CPU).
- ``column``: the head as ``weight @ hidden.T`` at every row count.

Every round runs each (dtype, form) once, the order rotated from round to round, so drift hits
them alike and ratios compare things run side by side. A sweep's first pass over each m is a
warm-up and is not kept. v(m)/v(1) is the median over rounds of each round's own ratio, with the
lowest and highest of them beside it. Not a test: run it alone, on a quiet machine.

Then one decode step and (where the largest m is above 1) a pass over it, alternated, each split into the time
inside the linear layers, the output head's apart, and outside them: where the one-row step's layers stream
near the read bandwidth, the rest bounds its share; what the wider pass adds in each part is where
v(m)/v(1) goes.

With ``--draft``, a draft model's one-row step (a drafted token) and two-row catch-up are timed the same way
after the target's models are freed, in the same dtypes and forms, against a fresh read of memory.

Last, per dtype, the ratio of the linear layers' floors (``engine.arithmetic``): a pass reads the weights
once at the read bandwidth or multiplies each of them m times at torch's own matmul rate, whichever takes
longer. Where it passes 1, a kernel at the memory limit at one row and at torch's rate at m rows costs more at m.

"""

# This module: the command line, and the run's course (load, time, print the table, the passes' splits and the
# engine's forms, write the JSON). It imports torch only when it runs, so registering the subcommand costs nothing.

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...models.base import DTYPE_NAMES
from .curve import DEFAULT_POSITIONS, FORMS, curve_rows, engine_forms, table


def names(raw: str, accepted: Sequence[str], what: str) -> list[str]:
    """A comma list of ``accepted`` names, in order, each once; SystemExit naming any other (a typo must not
    cost a model load)."""
    chosen = [name.strip() for name in raw.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in accepted]
    if unknown or not chosen:
        raise SystemExit(f"--{what}: unknown {', '.join(unknown) or '(empty)'}; accepted: a comma list of {accepted}")
    return list(dict.fromkeys(chosen))


def check_target(target: str) -> None:
    """SystemExit saying why ``target`` cannot load (an unknown embedded name, a missing path or checkpoint),
    before torch loads any weights."""
    from ...models.loading import model_available

    problem = model_available(target, probe_hub=False)
    if problem:
        raise SystemExit(f"verify-curve: {problem}")


def positions(raw: str) -> list[int]:
    """The m to report, sorted, with 1 added: v(1) is every ratio's denominator."""
    try:
        chosen = sorted({int(part) for part in raw.split(",") if part.strip()})
    except ValueError:
        chosen = []
    if not chosen or chosen[0] < 1:
        raise SystemExit(f"--m: expected a comma list of positive integers, got {raw!r}")
    return chosen if chosen[0] == 1 else [1, *chosen]


def _rounds(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer of at least 1, got {raw!r}")
    return value


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``verify-curve`` on ``commands`` (the subparsers of ``python -m pytest_specbench``)."""
    parser = commands.add_parser(
        "verify-curve",
        help="a target's verify-cost curve v(m) per dtype and kernel form",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("target", nargs="?", help="an embedded name (embedded:gemma3-270m), a checkpoint or hub id")
    which.add_argument("--tiny", action="store_true", help="a tiny random Gemma 3 built in-process (quick check)")
    parser.add_argument("--dtype", default="float32,bfloat16", help="comma list of dtypes (default float32,bfloat16)")
    parser.add_argument("--forms", default="own,engine", help=f"comma list of kernel forms: {', '.join(FORMS)}")
    parser.add_argument("--m", default=",".join(map(str, DEFAULT_POSITIONS)), help="comma list of m (positions)")
    parser.add_argument("--repeats", type=_rounds, default=7, help="rounds; v(m) is their median")
    parser.add_argument("--prompt", default="list_items", help="prompt category of the shipped suite")
    parser.add_argument(
        "--draft",
        help="a draft model to time after the target (its one-row step and two-row catch-up in the same dtypes and "
        "forms, against a fresh read of memory), the target's models freed first",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path, help="also write the curves and the machine's facts here")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Measure the curve the options ask for, print it, and write ``--json``; names are checked before any load."""
    chosen = names(args.dtype, DTYPE_NAMES, "dtype"), names(args.forms, list(FORMS), "forms"), positions(args.m)
    import torch

    from .measure import TINY_TARGET

    target = TINY_TARGET if args.tiny else args.target
    if not args.tiny:
        check_target(target)
    if args.draft and args.draft != TINY_TARGET:
        check_target(args.draft)
    with torch.inference_mode():
        return _course(args, target, *chosen)


def _course(args: argparse.Namespace, target: str, dtypes: list[str], forms: list[str], ms: list[int]) -> int:
    import torch

    from ...kernels import few_rows
    from ...kernels.bandwidth import memory_read_gbps, read_buffer_bytes
    from ...kernels.native_dtypes import native_dtype_facts, native_dtypes
    from ...models.weight_pages import pages_of
    from .measure import pass_splits

    native = native_dtypes(args.device)
    print(
        f"{target} on {args.device}: torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}; native dtypes: {', '.join(native)}"
    )
    for dtype in dtypes:
        if dtype not in native:
            print(f"note: {dtype} is not native on {args.device}: its v(m) times an emulation")
    models, input_ids, nbytes, read_gbps, kernels, points = _timed(args, target, dtypes, forms, ms, fresh_read=False)
    read_after = memory_read_gbps(args.device, max(nbytes.values()), fresh=True)
    print(f"prompt {input_ids.shape[1]} tokens, median of {args.repeats} round(s); form 'own' is also the hf engine's")
    pages = {dtype: pages_of(model) for dtype, model in models.items()}
    print(
        f"memory read bandwidth {read_gbps:.1f} GB/s before the rounds, {read_after:.1f} after "
        f"(the fastest of three reads of a float32 buffer of "
        f"{read_buffer_bytes(args.device, max(nbytes.values())) / 2**30:.2f} GiB, "
        f"{torch.get_num_threads()} threads); weights: "
        + ", ".join(
            f"{dtype} {size / 1e9:.2f} GB" + (f" ({pages[dtype]})" if pages[dtype] else "")
            for dtype, size in nbytes.items()
        )
    )
    print(table(points))
    widest = max(ms)
    passes = {
        f"{dtype} {form}": pass_splits(models[dtype], input_ids, form, widest, kernels=kernels[dtype, form])
        for dtype in models
        for form in forms
    }
    splits = {name: both[1] for name, both in passes.items()}
    for name, split in splits.items():
        share = split["linear_s"] / split["step_s"]
        gbps = split["linear_bytes"] / split["linear_s"] / 1e9
        print(
            f"one-row step, {name}: {1000 * split['step_s']:.1f} ms, {share:.0%} of it in linear layers, which "
            f"stream their {split['linear_bytes'] / 1e9:.2f} GB at {gbps:.1f} GB/s ({gbps / read_gbps:.0%} of read)"
        )
    for name, both in passes.items() if widest > 1 else ():
        extra = {part: 1000 * (both[widest][part] - both[1][part]) for part in ("step_s", "linear_s", "head_s")}
        print(
            f"{widest}-position pass, {name}: {1000 * both[widest]['step_s']:.1f} ms, {extra['step_s']:+.1f} on "
            f"the one-row step: {extra['linear_s'] - extra['head_s']:+.1f} in the layers' linear layers, "
            f"{extra['head_s']:+.1f} in the output head, {extra['step_s'] - extra['linear_s']:+.1f} outside them"
        )
    floors = _floors(models, splits, ms, read_gbps)
    for dtype, floor in floors.items():
        print(
            f"floors' v(m)/v(1), {dtype}: torch's matmul runs {floor['matmul_gflops']:.0f} GFLOP/s; linear layers "
            f"that read at {floor['read_gbps']:.1f} GB/s at one row and multiply at that rate at m rows give "
            + ", ".join(f"m = {m}: {ratio:.2f}" for m, ratio in floor["ratio"].items())
        )
    chosen = _print_engine_forms("engine forms", kernels, forms, max(ms))
    state = few_rows.recorded_state()
    if few_rows.unavailable_reason():
        print(f"note: {few_rows.unavailable_reason()}")
    elif few_rows.tiles_unavailable_reason():
        print(f"note: the few-rows kernel runs {state.partition(', ')[2]}")
    widest_split = None
    if widest > 1:
        widest_split = {"m": widest, "passes": {name: both[widest] for name, both in passes.items()}}
    del models, kernels, passes  # the draft is timed without the target's weights in memory
    draft = _draft_course(args, dtypes, forms) if args.draft else None
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
            "curves": [point.to_json() for point in points],
            "engine_forms": chosen,
            "one_row_split": splits,
            "widest_split": widest_split,
            "floors": floors,
            "few_rows_kernel": state,
            "weight_pages": pages,
            "draft": draft,
        }
        args.json.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return 0


def _timed(
    args: argparse.Namespace, source: str, dtypes: list[str], forms: list[str], ms: list[int], fresh_read: bool
) -> tuple[dict[str, Any], Any, dict[str, int], float, dict, list]:
    """``source`` loaded in each dtype and timed: its models, the prompt's ids, their weight bytes, the memory read
    bandwidth before the rounds (``fresh_read``: read again, not the process's first reading), their kernel forms and
    the curve's rows."""
    from ...kernels.bandwidth import memory_read_gbps, weight_bytes
    from .measure import kernel_forms_of, load_targets, measure

    models, input_ids = load_targets(source, dtypes, args.device, args.prompt)
    nbytes = {dtype: weight_bytes(model) for dtype, model in models.items()}
    read_gbps = memory_read_gbps(args.device, max(nbytes.values()), fresh=fresh_read)
    kernels = kernel_forms_of(models, forms)
    samples = measure(models, input_ids, forms, ms, args.repeats, kernels)
    return models, input_ids, nbytes, read_gbps, kernels, curve_rows(samples, ms, nbytes, read_gbps)


def _print_engine_forms(label: str, kernels: dict, forms: list[str], rows: int) -> dict[str, dict[str, str]]:
    """The engine forms settled per dtype (none where the ``engine`` form was not timed), printed and returned."""
    if "engine" not in forms:
        return {}
    chosen = engine_forms({dtype: forms_of for (dtype, form), forms_of in kernels.items() if form == "engine"}, rows)
    for dtype, layers in chosen.items():
        print(f"{label}, {dtype}: " + "; ".join(f"{layer}: {text}" for layer, text in layers.items()))
    return chosen


#: the draft's passes timed: its one-token step and its catch-up (its own last token and the target's bonus token)
DRAFT_POSITIONS = [1, 2]


def _draft_course(args: argparse.Namespace, dtypes: list[str], forms: list[str]) -> dict[str, Any]:
    """The draft model's one-row step and two-row catch-up per (dtype, form), timed as the target's passes are, with
    its share of a fresh read of memory: what a drafted token costs against its floor. Printed and returned."""
    import gc

    gc.collect()
    _, _, nbytes, read_gbps, kernels, points = _timed(args, args.draft, dtypes, forms, DRAFT_POSITIONS, fresh_read=True)
    print(f"draft {args.draft}: memory read {read_gbps:.1f} GB/s before its rounds; its passes (v(1): a drafted token)")
    print(table(points))
    chosen = _print_engine_forms("draft engine forms", kernels, forms, max(DRAFT_POSITIONS))
    return {
        "model": args.draft,
        "memory_read_gbps": read_gbps,
        "weight_bytes": nbytes,
        "curves": [point.to_json() for point in points],
        "engine_forms": chosen,
    }


def _floors(models: dict, splits: dict, ms: list[int], read_gbps: float) -> dict[str, dict]:
    """Per dtype: torch's matmul rate and the ratio of the linear layers' floors at m rows and at one
    (:func:`...engine.arithmetic.pass_floor_s`): a kernel at both floors would read that v(m)/v(1); one whose
    one-row step is above its floor reads less, and only a matmul faster than torch's would read less at both.
    The bandwidth is the faster of the probe's and the one-row step's own: the machine's reads drift, and a
    floor must not exceed what a pass already did."""
    from ...engine.arithmetic import matmul_gflops, pass_floor_s

    floors = {}
    for dtype, model in models.items():
        own = [split for name, split in splits.items() if name.split()[0] == dtype]
        rate = matmul_gflops(model.device, model.dtype)
        size = model.dtype.itemsize
        read = max([read_gbps, *(split["linear_bytes"] / split["linear_s"] / 1e9 for split in own)])
        split = own[0]
        floor = {m: pass_floor_s(int(split["linear_bytes"]), size, m, read, rate) for m in {1, *ms}}
        floors[dtype] = {"matmul_gflops": rate, "read_gbps": read, "ratio": {m: floor[m] / floor[1] for m in ms}}
    return floors
