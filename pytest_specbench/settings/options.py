"""The option table: every ``--specbench-*`` option declared once (name, parser, defaults, help), and the
parsers that turn a raw string into a value or a ValueError saying what is accepted.

Each option is also an ini key (``specbench_k`` for ``--specbench-k``).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..engine.names import SCHEDULES as SCHEDULE_KS

# SCHEDULE_KS: the k values that name a schedule instead of a constant draft length (engine/schedules.py).
from ..kernels.names import KERNELS
from ..models.base import DTYPE_NAMES as DTYPES
from .axes import AXES, DTYPE_ID_SUFFIXES  # noqa: F401 (the dtype axis's id parts; plots read it from here)
from .engines import ENGINE_DECLARATIONS, ENGINE_NAMES, OWN_LOOP_ENGINE, engines_in_words
from .option import Option
from .parsing import checked_path, comma_list, is_dir

DEFAULT_KS = "1,2,4,8,16"
# On CPU, four categories of the shipped suite keep the default sweep near 15 minutes on 2 cores.
CPU_PROMPTS = "natural,code_python,repetitive,list_items"


# --- parsers: raw string -> value, raising ValueError that says what is accepted

_DEVICE = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")


def parse_devices(raw: str) -> tuple[str, ...]:
    devices = comma_list(
        "a comma list of devices (cpu, cuda, cuda:N, mps); leave the option out for the default device"
    )(raw)
    for device in devices:
        if not _DEVICE.match(device):
            raise ValueError(f"unknown device {device!r}; accepted: cpu, cuda, cuda:N, mps, or a comma list of them")
    return devices


#: The most positions any run can use: no model's context window is longer (the longest published, Llama 4
#: Scout's, is 10M), and float32, in which rotary position embeddings are computed, holds whole numbers exactly
#: only up to 2**24. A prompt plus its new tokens, hence also k + 1 (one verify block), must fit in it.
MAX_POSITIONS = 2**24
#: torch's generators take a seed up to 2**64 - 1, and the speculative run seeds its own with seed + 1.
MAX_SEED = 2**64 - 2


def _int(minimum: int, maximum: int | None = None, why: str = "") -> Callable[[str], int]:
    """An integer parser; ``maximum`` (with ``why``, the reason for it) refuses what no run can use, before a huge
    value grows memory or overflows a C integer."""
    accepted = f"an integer >= {minimum}" if maximum is None else f"an integer >= {minimum} and <= {maximum}"
    if why:
        accepted += f" ({why})"

    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{raw!r} is not a whole number; accepted: {accepted}") from None
        if value < minimum:
            raise ValueError(f"{value} is too small; accepted: {accepted}")
        if maximum is not None and value > maximum:
            raise ValueError(f"{value} is too large; accepted: {accepted}")
        return value

    return parse


_K_BOUND = f"a verify block of k + 1 positions must fit in a context window, and none holds more than {MAX_POSITIONS}"


def _ks(raw: str) -> tuple[int | str, ...]:
    accepted = (
        f"a comma list of integers >= 1 and <= {MAX_POSITIONS - 1} and the schedules "
        f"{' and '.join(SCHEDULE_KS)}, e.g. 1,2,4,8,16,auto"
    )
    items = comma_list(accepted)(raw)
    try:
        return tuple(item if item in SCHEDULE_KS else _int(1, MAX_POSITIONS - 1, _K_BOUND)(item) for item in items)
    except ValueError as error:
        raise ValueError(f"{error} (in the comma list {raw!r}; {accepted})") from None


#: the largest batch size: a batch's rows all sit in one forward pass, and far past the batch sizes any server
#: runs (hundreds) memory runs out long before this bound; it refuses a typo before a huge batch is built
MAX_BATCH = 4096


def _batches(raw: str) -> tuple[int, ...]:
    accepted = f"a comma list of batch sizes, integers >= 1 and <= {MAX_BATCH}, e.g. 1,4,16"
    items = comma_list(accepted)(raw)
    try:
        sizes = tuple(
            _int(1, MAX_BATCH, "a batch of B prompts is B rows of every forward pass")(item) for item in items
        )
    except ValueError as error:
        raise ValueError(f"{error} (in the comma list {raw!r}; {accepted})") from None
    duplicates = sorted({size for size in sizes if sizes.count(size) > 1})
    if duplicates:  # "4,04" passes the string check
        raise ValueError(f"listed more than once: {', '.join(map(str, duplicates))}")
    return sizes


def _threads(raw: str) -> int:
    cores = os.cpu_count()
    return (
        _int(1, cores, f"this machine has {cores} logical CPUs; more threads only contend for them")(raw)
        if cores
        else _int(1)(raw)
    )


def _engines(raw: str) -> tuple[str, ...]:
    engines = comma_list(f"a comma list of engines: {', '.join(ENGINE_NAMES)}")(raw)
    unknown = [engine for engine in engines if engine not in ENGINE_NAMES]
    if unknown:
        raise ValueError(f"unknown engine {unknown[0]!r}; accepted: {', '.join(ENGINE_NAMES)} or a comma list of them")
    return engines


def _kernels(raw: str) -> str:
    if raw not in KERNELS:
        raise ValueError(f"unknown kernel setting {raw!r}; accepted: {', '.join(KERNELS)}")
    return raw


def _per_category(raw: str) -> int | None:
    """N prompts per category, or ``all`` (None): every prompt of each."""
    if raw == "all":
        return None
    try:
        return _int(1)(raw)
    except ValueError as error:
        raise ValueError(f"{error}, or all (every prompt of each category)") from None


#: how categories group in the leaderboard view (``--specbench-category-groups``): ``spec_bench`` as Spec-Bench's
#: ``speed.py`` reports them (MT-bench's categories as one group, every other category its own), ``category``
#: each category its own
CATEGORY_GROUPINGS: tuple[str, ...] = ("spec_bench", "category")


def _category_grouping(raw: str) -> str:
    if raw not in CATEGORY_GROUPINGS:
        raise ValueError(f"unknown category grouping {raw!r}; accepted: {', '.join(CATEGORY_GROUPINGS)}")
    return raw


#: --specbench-dtype's word for the dtypes the run's device computes natively (settings/config.py resolves it)
AUTO_DTYPES = "auto"
#: what a dtype adds to a case id when several run (float32 adds nothing, so its ids stay those of a one-dtype run)


def _dtypes(raw: str) -> tuple[str, ...]:
    accepted = f"{', '.join(DTYPES)} or a comma list of them, or {AUTO_DTYPES} (the device's native dtypes)"
    dtypes = comma_list(accepted)(raw)
    if AUTO_DTYPES in dtypes and len(dtypes) > 1:
        raise ValueError(f"{AUTO_DTYPES} stands alone (it names every native dtype); accepted: {accepted}")
    unknown = [dtype for dtype in dtypes if dtype not in (*DTYPES, AUTO_DTYPES)]
    if unknown:
        raise ValueError(f"unknown dtype {unknown[0]!r}; accepted: {accepted}")
    return dtypes


def _number(raw: str, accepted: str) -> float:
    """A finite float; NaN and infinities are refused as such (every setting is recorded in strict JSON, which
    has neither, and no comparison with NaN means anything)."""
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{raw!r} is not a number; accepted: {accepted}") from None
    if math.isnan(value):
        raise ValueError(f"{raw!r} is not a number; accepted: {accepted}")
    if math.isinf(value):
        raise ValueError(f"{raw!r} is infinite; accepted: {accepted.replace('a number', 'a finite number', 1)}")
    return value


def _non_negative_float(raw: str, accepted: str = "a number >= 0") -> float:
    value = _number(raw, accepted)
    if value < 0:
        raise ValueError(f"{raw!r} is negative; accepted: {accepted}")
    return value


def _positive_float(raw: str) -> float:
    value = _non_negative_float(raw, "a number > 0")
    if value == 0:
        raise ValueError(f"{raw!r} is zero; accepted: a finite number > 0")
    return value


def _fraction(raw: str) -> float:
    """A fraction in [0, 1]: a drop of acceptance (itself in [0, 1]) or a relative drop of speed."""
    accepted = "a number in [0, 1]"
    value = _non_negative_float(raw, accepted)
    if value > 1:
        raise ValueError(f"{raw!r} is above 1; accepted: {accepted}")
    return value


def _ci_target(raw: str) -> float:
    # A half-width of 100% or more says nothing about a speedup: every interval would count as tight.
    accepted = "a fraction in (0, 1), e.g. 0.05 for +/-5%"
    value = _number(raw, accepted)
    if not 0 < value < 1:
        raise ValueError(f"{raw!r} is outside (0, 1); accepted: {accepted}")
    return value


def _probability(raw: str) -> float:
    accepted = "a number in (0, 1] (1 switches top-p off)"
    value = _number(raw, accepted)
    if not 0 < value <= 1:
        raise ValueError(f"{raw!r} is outside (0, 1]; accepted: {accepted}")
    return value


def _finite_non_negative_float(raw: str) -> float:
    return _non_negative_float(raw)


def _existing_file(raw: str) -> Path:
    path = checked_path(raw)
    try:
        found = path.is_file()
    except OSError as error:
        raise ValueError(f"{path} cannot be read ({error.strerror or error})") from None
    if not found:
        raise ValueError(f"no such file: {path}")
    return path


def _output_path(raw: str) -> Path | None:
    if raw.strip() in ("", "none", "off"):
        return None
    # Path() drops a trailing slash: "dir/" would become a file named dir.
    if raw.endswith(("/", os.sep)) or is_dir(checked_path(raw)):
        raise ValueError(
            f"{raw} is a folder, and a file path is needed; accepted: a file path (e.g. "
            f"{raw.rstrip('/' + os.sep) or '.'}/results.csv), or empty to disable"
        )
    return checked_path(raw)


#: the parser of a file output, for the command line's outputs too (python -m pytest_specbench merge)
parse_output_path = _output_path


def _path(raw: str) -> Path:
    return checked_path(raw)


def _output_dir(raw: str) -> Path | None:
    if raw.strip() in ("", "none", "off"):
        return None
    path = checked_path(raw)
    try:
        blocked = path.exists() and not path.is_dir()
    except OSError as error:
        raise ValueError(f"{path} cannot be used ({error.strerror or error})") from None
    if blocked:
        raise ValueError(f"{path} is a file; accepted: a directory (created if missing), or empty to disable")
    return path


GATE_DIFFERING = ("refuse", "compare-matching")
#: how a case's baseline is timed (--specbench-pairing)
INTERLEAVED, ROUNDS = "interleaved", "rounds"
PAIRINGS = (INTERLEAVED, ROUNDS)
#: the pairing recorded under --specbench-baseline-once, whose baseline is timed apart from the runs
#: (no option value: the flag chooses it); the rows name the design alike
BASELINE_ONCE = "baseline-once"
#: what runs recorded for it before it had the rows' name
_BASELINE_ONCE_BEFORE = "unpaired"


def pairing_that_runs(pairing: str, baseline_once: bool) -> str:
    """The pairing a run records: :data:`BASELINE_ONCE` under --specbench-baseline-once, which times the
    baseline in a block's first rounds only and compares unpaired, whatever --specbench-pairing says; else
    ``pairing``."""
    return BASELINE_ONCE if baseline_once else pairing


def _pairing(raw: str) -> str:
    if raw not in PAIRINGS:
        raise ValueError(f"unknown pairing {raw!r}; accepted: {', '.join(PAIRINGS)}")
    return raw


def _gate_differing(raw: str) -> str:
    if raw not in GATE_DIFFERING:
        raise ValueError(f"unknown policy {raw!r}; accepted: {', '.join(GATE_DIFFERING)}")
    return raw


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|min|h)?$")
_UNIT_SECONDS = {None: 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def _duration(raw: str) -> float | None:
    """Seconds, from 900, 900s, 15m or 1h; None for off."""
    accepted = "a duration such as 15m, 900s, 1h or 900 (seconds), above zero, or off"
    if raw.lower() in ("off", "none"):
        return None
    try:
        number = float(raw)
    except ValueError:
        number = 0.0
    if not math.isfinite(number):
        raise ValueError(f"{raw!r} is {'not a number' if math.isnan(number) else 'infinite'}; accepted: {accepted}")
    match = _DURATION.match(raw.lower())
    if not match:
        raise ValueError(f"{raw!r} is not a duration; accepted: {accepted}")
    seconds = float(match[1]) * _UNIT_SECONDS[match[2]]
    if not 0 < seconds < 10**7:
        raise ValueError(f"{raw!r} is outside (0 s, 115 days); accepted: {accepted}")
    return seconds


def _on_off(raw: str) -> bool:
    if raw.lower() not in ("on", "off"):
        raise ValueError(f"{raw!r} is neither on nor off; accepted: on, off")
    return raw.lower() == "on"


def _shard(raw: str) -> tuple[int, int]:
    match = re.match(r"^(\d+)/(\d+)$", raw)
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise ValueError(f"{raw!r} is not I/N with 1 <= I <= N; accepted: e.g. 1/2 and 2/2")
    return int(match[1]), int(match[2])


OPTIONS: tuple[Option, ...] = (
    Option(
        "gpu",
        "devices",
        "device(s): cpu, cuda, cuda:N, or a comma list (one per xdist worker); "
        "default: cuda:0 when available, else cpu",
        parse_devices,
        metavar="DEVICE",
        unset=(),
        changes_results=True,
    ),
    Option(
        "pairs",
        "pairs",
        "comma list of model pair ids to run (default: every defined pair except the "
        "opt-in Qwen pairs, which run only when named, and on a CPU the built-in gpt2_tiny, gpt2_medium and "
        "gpt2_large, which run when named or on a GPU). A pair named here or declared in a pairs file fails "
        "when its model is missing; a built-in pair nobody named is skipped with the reason unless its models "
        "are in the local cache (it is never downloaded)",
        comma_list("a comma list of pair ids; leave the option out to run every defined pair"),
        metavar="IDS",
        unset=(),
    ),
    Option(
        "pairs-file", "pairs_file", "TOML file defining extra model pairs", _existing_file, metavar="PATH", reads=True
    ),
    Option(
        "k",
        "ks",
        f"comma list of draft lengths k (default {DEFAULT_KS}); 'auto' and 'heuristic' name "
        "schedules that choose k at each step",
        _ks,
        DEFAULT_KS,
        metavar="LIST",
        # Chooses cases, as the pairs and prompts do (each case's k is in its id): not result-changing. What the
        # list sets beyond them, how far the cost probe measures v(m) (measure/costs.probed_k), hence a row's
        # recommended k and a schedule's range, each row records (verify_costs_ms).
    ),
    Option(
        "batch",
        "batches",
        "comma list of batch sizes (default 1): a case of batch B decodes B prompts of its "
        "category at once (left padded; the prompt's own first, repeated when the category has fewer), with the "
        "batched engine, against the target's batched greedy decoding; greedy only, constant k only, native "
        "engine only (other cases of batch > 1 are skipped with the reason)",
        _batches,
        "1",
        metavar="SIZES",
        unset=(1,),
        changes_results=True,  # unset: what a record from before the option means
        order_free=True,
    ),
    Option(
        "engine",
        "engines",
        f"comma list of decoding engines: {engines_in_words()}, run side by side (default {OWN_LOOP_ENGINE})",
        _engines,
        OWN_LOOP_ENGINE,
        metavar="ENGINES",
        # A run of one engine leaves it out of the case ids: another engine's run has the same ids.
        changes_results=True,
        order_free=True,
    ),
    *(option for engine in ENGINE_DECLARATIONS for option in engine.options),  # each engine declares its own
    Option(
        "kernels",
        "kernels",
        "how the native engine computes every linear layer of the models in its loop: the target's passes (verify "
        "blocks and one-row steps, its greedy baseline's included) and a draft model's, each model in forms of its "
        "own: auto (per layer shape and row count, the fastest of the model's "
        "own, the few-rows kernel and, for the output head, weight @ hidden.T, measured before timing), rows (the "
        "few-rows kernel, float32 and bfloat16 on CPU), column (the head as weight @ hidden.T) or linear (the "
        "model's own) (default auto). Its earlier name, --specbench-head-kernel (ini specbench_head_kernel), "
        "still works and is deprecated; runs recorded under it compare equal",
        _kernels,
        "auto",
        metavar="KERNEL",
        changes_results=True,
        aliases=("head-kernel",),
    ),
    Option(
        "compile",
        "compile_steps",
        "native engine and baseline: static KV caches and torch.compile for the "
        "one-token steps (the draft's proposals, the greedy baseline's tokens; CUDA graphs on CUDA); verify "
        "passes stay eager. For GPUs, where a small model's step is mostly launch overhead; warm-up rounds "
        "absorb the compilation",
        changes_results=True,
    ),
    Option(
        "prompts",
        "prompt_categories",
        "comma list of prompt categories and category groups (mt_bench: the MT-bench categories the file "
        f"holds) (default: all; on CPU, of the shipped suite, {CPU_PROMPTS})",
        comma_list("a comma list of prompt categories or groups; leave the option out for the default categories"),
        cpu_default=CPU_PROMPTS,
        metavar="CATEGORIES",
        unset=(),
    ),
    Option(
        "prompt-file",
        "prompt_file",
        'JSON Lines prompt file to use instead of the shipped suite: prompts ({"id", "category", "text"}, "id" '
        'optional) or the questions of Spec-Bench\'s or MT-bench\'s question.jsonl ({"question_id", "category", '
        '"turns"}, each turn asked in order), each line told apart by its fields',
        _existing_file,
        metavar="PATH",
        reads=True,
        changes_results=True,
    ),
    Option(
        "prompts-per-category",
        "prompts_per_category",
        "prompts run per category: N or all (default all; on CPU 1). A given N is a sample drawn from each "
        "category with --specbench-seed and run in file order (a category of N or fewer runs whole); the CPU "
        "default runs each category's first prompt. The terminal summary says which ran",
        _per_category,
        "all",
        cpu_default="1",
        metavar="N",
    ),
    Option(
        "category-groups",
        "category_groups",
        "how the leaderboard view groups prompt categories: spec_bench (as Spec-Bench's speed.py: MT-bench's "
        "eight categories as one mt_bench group, every other category its own) or category (each its own) "
        "(default spec_bench)",
        _category_grouping,
        "spec_bench",
        metavar="GROUPING",
    ),
    Option(
        "context-tokens",
        "context_tokens",
        "pad or cut every prompt (each turn of a question) to exactly N tokens, padded in front with the file's "
        "other prompts; a file of one prompt has none to pad with, so there N only cuts",
        _int(
            1,
            MAX_POSITIONS - 1,
            f"a prompt and its new tokens must fit in a context window, and none holds "
            f"more than {MAX_POSITIONS} positions",
        ),
        metavar="N",
        changes_results=True,
    ),
    Option(
        "max-new-tokens",
        "max_new_tokens",
        "tokens generated per run (default 128; on CPU 32)",
        _int(
            1,
            MAX_POSITIONS - 1,
            f"a prompt and its new tokens must fit in a context window, and none holds "
            f"more than {MAX_POSITIONS} positions",
        ),
        "128",
        cpu_default="32",
        metavar="N",
        changes_results=True,
    ),
    Option(
        "dtype",
        "dtypes",
        f"comma list of model dtypes ({', '.join(DTYPES)}): every case runs once in each, against the target's "
        f"baseline in the same dtype, ids gaining -bf16 or -fp16 when several run; {AUTO_DTYPES}: the dtypes the "
        "run's device computes natively, float32 first (the default: a run shows the dtype its machine should "
        "use beside float32). A pair's own dtype in its pairs file wins: it runs once, in that one",
        _dtypes,
        AUTO_DTYPES,
        metavar="DTYPES",
        changes_results=True,
        order_free=True,
        single_as_item=True,
    ),
    Option(
        "warmup",
        "warmup",
        "untimed warm-up runs of baseline and speculative decoding before the first case of each pair (default 1)",
        _int(0),
        "1",
        metavar="N",
        changes_results=True,
    ),
    Option(
        "min-rounds",
        "min_rounds",
        "timed rounds per case at least (a round runs baseline and speculative decoding side by side; default 3, "
        "2 on a CPU, where a block's pooled noise makes two rounds of ten cases as tight as three of few)",
        _int(1),
        "3",
        cpu_default="2",
        metavar="N",
        changes_results=True,
    ),
    Option(
        "max-rounds",
        "max_rounds",
        "timed rounds per case at most (default 30)",
        _int(1),
        "30",
        metavar="N",
        changes_results=True,
    ),
    Option(
        "ci-target",
        "ci_target",
        "stop timing a case once the 95% interval of its speedups is within "
        "+/- this fraction, in (0, 1) (default 0.05); a case still wider is marked unstable",
        _ci_target,
        "0.05",
        metavar="FRACTION",
        changes_results=True,
    ),
    Option(
        "budget",
        "run_budget",
        "the whole run's timing budget (a block: the cases sharing a target and a prompt): 15m, 900s, 1h or "
        "plain seconds; none (or off) for full rounds (default 15m). Before timing, the run estimates every "
        "block from a probe of its models and divides the budget over them; where their --specbench-min-rounds "
        "cannot fit, it stops before timing and names what would fit. A run that chose no k, dtype, pair or prompt "
        "instead leaves out its largest k until its minimum rounds leave a fifth of the budget. Loading and "
        "warm-up count against it; losslessness is always "
        "checked",
        _duration,
        "15m",
        metavar="DURATION",
    ),
    Option(
        "race",
        "race",
        "on: within a (pair, engine, prompt), a constant k slower than the leader at 95% "
        "(paired, Holm-corrected) stops being timed and is marked eliminated; off: every case is timed to the "
        "interval target (default on)",
        _on_off,
        "on",
        metavar="on|off",
        changes_results=True,
    ),
    Option(
        "case-budget",
        "case_budget",
        "seconds of timed rounds per case (its speculative runs and the "
        "baselines of its rounds) before it stops short of the interval target (default: none, the run's "
        "--specbench-budget decides)",
        _positive_float,
        metavar="SECONDS",
        changes_results=True,
    ),
    Option(
        "threads",
        "threads",
        "torch CPU threads (default: torch's own choice; under xdist on CPU, "
        "cores / workers; at most this machine's logical CPUs)",
        _threads,
        metavar="N",
        changes_results=True,
    ),
    Option(
        "pairing",
        "pairing",
        "how each speculative run's baseline is timed: interleaved (default: target-only "
        "steps run between the run's own steps until their time has caught up with its time, so both see the "
        "machine alike; native engine, batch 1) or rounds (whole baseline runs between the cases of a round, "
        "see --specbench-baseline-every; what the hf engine, batches and --specbench-compile always use)",
        _pairing,
        INTERLEAVED,
        metavar="interleaved|rounds",
        changes_results=True,
        unset=ROUNDS,
    ),  # what a run recorded before the option existed used
    Option(
        "baseline-every",
        "baseline_every",
        "with --specbench-pairing=rounds, within a round, run the "
        "target-only baseline before the first case, after every N cases and after the last; each case's "
        "speedup compares with the baseline interpolated in time between the two around it, so the machine's "
        "drift cancels (default 2)",
        _int(1),
        "2",
        metavar="N",
        changes_results=True,
    ),
    Option(
        "baseline-once",
        "baseline_once",
        "time the target-only baseline only in a block's first "
        "--specbench-min-rounds rounds instead of in every round (speedups then compare unpaired, and the "
        "run and its rows record the pairing as baseline-once; refused beside --specbench-pairing)",
        changes_results=True,
    ),
    Option(
        "tie-tolerance",
        "tie_tolerance",
        "under float16/bfloat16, a divergence where the target's top-2 logit "
        "margin is below this is a tie-divergence, not a failure (default 0.1)",
        _non_negative_float,
        "0.1",
        metavar="LOGITS",
        changes_results=True,
    ),
    Option(
        "stop-at-eos",
        "stop_at_eos",
        "stop generating at EOS instead of generating a fixed length",
        changes_results=True,
    ),
    Option(
        "temperature",
        "temperature",
        "sample with this temperature instead of decoding greedily (default 0: "
        "greedy); each case then checks the engine's acceptance rule on its real distributions instead of "
        "comparing tokens",
        _finite_non_negative_float,
        "0",
        metavar="T",
        changes_results=True,
    ),
    Option(
        "top-p",
        "top_p",
        "nucleus sampling: keep the smallest set of tokens with this much probability "
        "(default 1: off; with --specbench-temperature)",
        _probability,
        "1",
        metavar="P",
        changes_results=True,
    ),
    Option(
        "top-k",
        "top_k",
        "keep the k most likely tokens (default 0: off; with --specbench-temperature)",
        _int(0),
        "0",
        metavar="K",
        changes_results=True,
    ),
    Option(
        "seed",
        "seed",
        "seed of the sampling generators: the same seed repeats a sampled run on one machine (default 0)",
        _int(0, MAX_SEED, "torch's generators take 64-bit seeds, and the speculative run uses seed + 1"),
        "0",
        metavar="N",
        changes_results=True,
    ),
    Option(
        "sampling-check-draws",
        "sampling_check_draws",
        "under sampling, simulated draft tokens of each case's distribution check (default 20000)",
        _int(100),
        "20000",
        metavar="N",
        changes_results=True,
    ),
    Option(
        "csv",
        "csv_path",
        "CSV results file (default spec_results.csv; empty to disable)",
        _output_path,
        "spec_results.csv",
        metavar="PATH",
        writes=True,
    ),
    Option(
        "json",
        "json_path",
        "JSON results file (default spec_results.json; empty to disable)",
        _output_path,
        "spec_results.json",
        metavar="PATH",
        writes=True,
    ),
    Option(
        "log",
        "log_path",
        "results log: each finished case appended as one JSON line, flushed to disk at once "
        "(default: the CSV's path with .jsonl, spec_results.jsonl, or the JSON's when the CSV is off; "
        "empty to disable)",
        _output_path,
        metavar="PATH",
        writes=True,
        may_share="resume",
    ),
    Option(
        "history",
        "history_dir",
        "run history: every run that measured a case also keeps its CSV, JSON, log, "
        "report and figures in DIR/NNNN-<UTC time>-<short git commit>/, for python -m pytest_specbench compare "
        "--last or NNNN (default .specbench/runs; empty to disable)",
        _output_dir,
        ".specbench/runs",
        metavar="DIR",
    ),
    Option(
        "resume",
        "resume",
        "finish an interrupted run: take the cases a results log holds and run only the "
        "others; the files hold the merged result",
        _existing_file,
        metavar="PATH",
        reads=True,
    ),
    Option(
        "cache-dir",
        "cache_dir",
        "cache for converted models (default $SPECBENCH_CACHE_DIR, else "
        "$XDG_CACHE_HOME/pytest-specbench, else ~/.cache/pytest-specbench)",
        _path,
        metavar="PATH",
    ),
    Option(
        "save-baseline",
        "save_baseline",
        "write the run's acceptance, tau and verdicts per case to PATH; "
        "refused when a case has no result or the run was interrupted, unless --specbench-allow-missing",
        _output_path,
        metavar="PATH",
        writes=True,
        may_share="baseline",
    ),
    Option(
        "baseline",
        "baseline",
        "compare the run with a saved baseline and fail on a regression",
        _existing_file,
        metavar="PATH",
        reads=True,
    ),
    Option(
        "max-acceptance-drop",
        "max_acceptance_drop",
        "largest absolute acceptance drop allowed against the baseline, in [0, 1] (default 0.02)",
        _fraction,
        "0.02",
        metavar="DROP",
    ),
    Option(
        "max-speedup-drop",
        "max_speedup_drop",
        "gate speed too: largest relative speedup drop allowed, e.g. 0.1, in [0, 1] (default: speed is not gated)",
        _fraction,
        metavar="FRACTION",
    ),
    Option(
        "allow-missing",
        "allow_missing",
        "baseline cases with no result in this run are not regressions, "
        "and a run with cases missing may save a (partial) baseline; a gate that compared no case still fails",
    ),
    Option(
        "gate-differing",
        "gate_differing",
        "what the gate does when this run's result-changing settings differ "
        "from those the baseline recorded: refuse (default: a usage error listing each difference, before any "
        "model loads) or compare-matching (gate only the cases whose own settings agree: new tokens, prompt "
        "tokens, sampling, dtype, engine, device kind; the differences are listed and a gate that compared no "
        "case fails)",
        _gate_differing,
        "refuse",
        metavar="POLICY",
    ),
    Option(
        "plots",
        "plots_dir",
        "write the figures (PNG, one per figure) to DIR at the end of the run; needs matplotlib (the plots extra)",
        _output_dir,
        metavar="DIR",
        writes=True,
    ),
    Option(
        "report",
        "report_path",
        "write a Markdown report of the run to PATH (figures linked from --specbench-plots when given)",
        _output_path,
        metavar="PATH",
        writes=True,
    ),
    Option(
        "shard",
        "shard",
        "run shard I of N: a stable split of the case matrix by pair (each pair on one "
        "shard); merge the shards' JSON with python -m pytest_specbench merge",
        _shard,
        metavar="I/N",
    ),
) + tuple(axis.option for axis in AXES if axis.option is not None)  # the axes that declare theirs


#: each option's earlier names, as recorded (``--specbench-head-kernel``, ``specbench_head_kernel``) -> its name now
RENAMED: dict[str, str] = {
    old: new
    for option in OPTIONS
    for names, new in ((option.alias_clis, option.cli), (option.alias_dests, option.dest))
    for old in names
}


def current_setting_names(recorded: Mapping[str, Any]) -> dict[str, Any]:
    """Settings a stored run recorded (a log's or a baseline's ``settings``, by ``--specbench-*`` option; a run's
    JSON ``options``, by ``specbench_*`` dest) under each option's name now: a value stored under an earlier name
    (:attr:`Option.aliases`) reads as the option's, so a run recorded before a rename compares equal to one after.
    Where both names are recorded, the current one's value stands."""
    current = {
        RENAMED.get(name, name): value
        for name, value in recorded.items()
        if not (name in RENAMED and RENAMED[name] in recorded)
    }
    for name in ("--specbench-pairing", "specbench_pairing"):  # a value renamed: the design's one name
        if current.get(name) == _BASELINE_ONCE_BEFORE:
            current[name] = BASELINE_ONCE
    return current


def default_of(field: str) -> str | None:
    """The default value of the option whose config field is ``field``, as written in the table."""
    return next(option.default for option in OPTIONS if option.field == field)
