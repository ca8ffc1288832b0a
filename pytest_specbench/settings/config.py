"""SpecbenchConfig: every option and ini setting, read and validated once.

Each option is also an ini key (``specbench_k`` for ``--specbench-k``);
the command line wins over the ini file, which wins over the default.
A bad value raises :class:`ConfigError` naming the option and what would be
accepted, before any model loads.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import axes
from .engines import ENGINE_DECLARATIONS
from .options import (
    AUTO_DTYPES,
    MAX_POSITIONS,
    OPTIONS,
    Option,
    current_setting_names,
    pairing_that_runs,
    parse_devices,
)
from .parsing import ConfigError

_PAIRING, _BASELINE_ONCE, _DTYPE = (
    next(option for option in OPTIONS if option.name == name) for name in ("pairing", "baseline-once", "dtype")
)


@dataclass(frozen=True)
class SpecbenchConfig:
    """Validated settings of one session, built by :func:`parse_settings` from :data:`OPTIONS`.

    No defaults here: each option's default lives in its declaration, once.
    """

    devices: tuple[str, ...]  # empty: cuda:0 when available, else cpu
    pairs: tuple[str, ...]  # empty: every defined pair
    pairs_file: Path | None
    ks: tuple[int | str, ...]  # integers and schedule names (SCHEDULE_KS)
    engines: tuple[str, ...]
    batches: tuple[int, ...]  # batch sizes, each >= 1
    kernels: str  # the native engine's kernel setting (engine/names.py KERNELS)
    compile_steps: bool
    prompt_categories: tuple[str, ...]  # empty: all
    prompt_file: Path | None
    prompts_per_category: int | None  # None: every prompt of each category
    category_groups: str  # cases.prompts.CATEGORY_GROUPINGS
    context_tokens: int | None
    max_new_tokens: int
    dtypes: tuple[str, ...]  # model dtypes, each case run once in each ("auto" resolved: see resolve_auto_dtypes)
    warmup: int
    min_rounds: int
    max_rounds: int
    ci_target: float
    case_budget: float | None  # None: no per-case budget
    run_budget: float | None  # seconds for the whole run; None: off
    race: bool
    threads: int | None
    pairing: str  # "interleaved" or "rounds" (options.PAIRINGS)
    baseline_every: int  # cases between baseline runs within a round (pairing "rounds")
    baseline_once: bool
    tie_tolerance: float
    stop_at_eos: bool
    temperature: float
    top_p: float
    top_k: int
    seed: int
    sampling_check_draws: int
    csv_path: Path | None
    json_path: Path | None
    log_path: Path | None
    history_dir: Path | None  # the run history's folder
    resume: Path | None
    cache_dir: Path | None
    save_baseline: Path | None
    baseline: Path | None
    max_acceptance_drop: float
    max_speedup_drop: float | None
    allow_missing: bool
    gate_differing: str  # "refuse" or "compare-matching" (options.GATE_DIFFERING)
    plots_dir: Path | None
    report_path: Path | None
    shard: tuple[int, int] | None  # (I, N)
    # The values to run of each axis that declares its own option (settings/axes.py ``Axis.option``), by axis.
    axis_values: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    # Each engine's own settings (settings/engines.py ``EngineDeclaration.options``), by option field.
    engine_values: dict[str, Any] = field(default_factory=dict)
    # The raw values used (given or defaulted), for the JSON record of the run.
    raw: dict[str, Any] = field(default_factory=dict, compare=False)
    # Names of the options the user gave (command line or ini); the rest are defaults.
    given: frozenset[str] = field(default_factory=frozenset, compare=False)
    # The GPU defaults apply (a CUDA device given, or none given and one available): they pick the default pairs
    # (cases.pairs.default_pair_names) as they pick the other options' defaults.
    on_gpu: bool = False

    def __getattr__(self, name: str) -> Any:
        # An axis's or an engine's own option is read as its option's field is, like every other setting.
        for values in (self.__dict__.get("axis_values", {}), self.__dict__.get("engine_values", {})):
            if name in values:
                return values[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def parse_settings(
    values: dict[str, tuple[Any, str]], cuda_available: Callable[[], bool] = lambda: False
) -> SpecbenchConfig:
    """Build the config from ``{option name: (raw value, where it came from)}``.

    Options not given take their default, or their CPU default when the run
    is on CPU (no CUDA device given, and none available). ``where`` (for
    example ``"--specbench-k"`` or ``"ini specbench_k"``) goes into error messages.
    """
    values = dict(values)
    given = frozenset(values)
    on_gpu = _on_gpu(values, cuda_available)
    for option in OPTIONS:
        default = option.cpu_default if (option.cpu_default and not on_gpu) else option.default
        if option.name not in values and default is not None:
            values[option.name] = (default, option.cli)
    fields: dict[str, Any] = {}
    raw_record: dict[str, Any] = {}
    for option in OPTIONS:
        if option.name not in values:
            continue
        raw, where = values[option.name]
        raw_record[option.dest] = raw
        if option.flag:
            fields[option.field] = bool(raw)
            continue
        try:
            fields[option.field] = option.parse(str(raw).strip())
        except ValueError as error:
            raise ConfigError(f"{where}={raw!r}: {error}") from None
    # Neither given nor defaulted.
    for option in OPTIONS:
        fields.setdefault(option.field, False if option.flag else option.unset)
    if fields["min_rounds"] > fields["max_rounds"]:
        raise ConfigError(
            f"--specbench-min-rounds={fields['min_rounds']} is above --specbench-max-rounds="
            f"{fields['max_rounds']}; accepted: min rounds <= max rounds"
        )
    if (fields["context_tokens"] or 0) + fields["max_new_tokens"] > MAX_POSITIONS:
        raise ConfigError(
            f"--specbench-context-tokens={fields['context_tokens']} and --specbench-max-new-tokens="
            f"{fields['max_new_tokens']} need more positions than any context window holds "
            f"({MAX_POSITIONS}); accepted: prompt tokens + new tokens <= {MAX_POSITIONS}"
        )
    # A step's block (its drafts and the target's token) fits the new tokens; a k list given asks for more than that.
    longest = fields["max_new_tokens"] - 1
    too_long = [k for k in fields["ks"] if isinstance(k, int) and k > max(longest, 1)] if "k" in given else []
    if too_long:
        raise ConfigError(
            f"{values['k'][1]}={values['k'][0]}: no step drafts more than {max(longest, 1)} token(s) with "
            f"--specbench-max-new-tokens={fields['max_new_tokens']} (a step's block is cut to the new tokens left), "
            f"so k={too_long[0]} would run as k={max(longest, 1)}; accepted: k up to {max(longest, 1)}, or more new "
            "tokens"
        )
    if fields["baseline_once"]:
        if "pairing" in given:  # a pairing given beside it would be recorded, yet not run
            raise ConfigError(
                f"{values['pairing'][1]}={values['pairing'][0]} and --specbench-baseline-once "
                "contradict each other: --specbench-baseline-once times the baseline in "
                "a block's first rounds only and compares the speedups unpaired; accepted: "
                "one of the two"
            )
        fields["pairing"] = raw_record[_PAIRING.dest] = pairing_that_runs(fields["pairing"], True)
    if fields["dtypes"] == (AUTO_DTYPES,):  # recorded as resolved: a resume or a gate compares what ran
        fields["dtypes"] = resolve_auto_dtypes(fields["devices"], on_gpu)
        raw_record[_DTYPE.dest] = ",".join(fields["dtypes"])
    if "log" not in values:  # its default follows the CSV (or the JSON) wherever that goes
        beside = fields["csv_path"] or fields["json_path"]
        fields["log_path"] = beside.with_suffix(".jsonl") if beside is not None else None
    declared = {axis.name: fields.pop(axis.option.field) for axis in axes.AXES if axis.option is not None}
    engine_values: dict[str, Any] = {}
    for engine in ENGINE_DECLARATIONS:
        own = {option.field: fields.pop(option.field) for option in engine.options}
        engine_values.update(engine.check(own, given, engine.name in fields["engines"]) if engine.check else own)
    return SpecbenchConfig(
        **fields, axis_values=declared, engine_values=engine_values, raw=raw_record, given=given, on_gpu=on_gpu
    )


def resolve_auto_dtypes(devices: tuple[str, ...], on_gpu: bool) -> tuple[str, ...]:
    """``--specbench-dtype=auto``: the dtypes the run's device computes natively
    (:func:`..kernels.native_dtypes.native_dtypes`), float32 first. With several devices (one per xdist worker), those
    native on every one, so every worker builds the same matrix. Imports torch: only a run that asks for it pays."""
    from ..kernels.native_dtypes import native_dtypes
    from .devices import check_devices

    check_devices(devices)  # a device this machine lacks is named as such, not probed
    native = [native_dtypes(device) for device in devices or ("cuda:0" if on_gpu else "cpu",)]
    return tuple(dtype for dtype in native[0] if all(dtype in other for other in native[1:]))


def _json_value(value: Any, option: Option | None = None) -> Any:
    if isinstance(value, tuple) and option is not None and option.single_as_item and len(value) == 1:
        return value[0]
    return list(value) if isinstance(value, tuple) else str(value) if isinstance(value, Path) else value


def result_settings(config: SpecbenchConfig) -> dict[str, Any]:
    """The values of the options that change what a case measures, as JSON types, by option name."""
    return {
        option.cli: _json_value(getattr(config, option.field), option) for option in OPTIONS if option.changes_results
    }


def result_settings_from_raw(raw: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`result_settings` of a run from the raw values its JSON records (``options``: each option given or
    defaulted, by dest; one left out, absent). A value that no longer parses here (a prompt file of another
    machine) is kept as recorded. A value recorded under an option's earlier name reads as the option's."""
    raw = current_setting_names(raw)
    settings = {}
    baseline_once = bool(raw.get(_BASELINE_ONCE.dest))
    for option in OPTIONS:
        if not option.changes_results:
            continue
        value = raw.get(option.dest)
        if option is _PAIRING and baseline_once:  # recorded before the pairing said what ran
            value = pairing_that_runs(str(value), True)
        if option.flag:
            settings[option.cli] = bool(value)
        elif value is None:
            settings[option.cli] = _json_value(option.unset, option)
        else:
            try:
                settings[option.cli] = _json_value(option.parse(str(value).strip()), option)
            except ValueError:
                settings[option.cli] = value
    return settings


def check_files(config: SpecbenchConfig) -> None:
    """Raise ConfigError when two file options name one file, or an output cannot be written where it points.

    Each output's folder is created if missing and a probe file is written in it and removed, so a
    path under a regular file or in a read-only folder fails now, not after hours of benchmarking.
    """
    from ..atomic import unwritable_reason

    named: dict[Path, list[Option]] = {}
    for option in OPTIONS:
        path = getattr(config, option.field) if option.writes or option.reads else None
        if path is not None:
            named.setdefault(path.resolve(), []).append(option)
    for path, options in named.items():
        writers = [option for option in options if option.writes]
        allowed = {option.name for option in writers} | {option.may_share for option in writers}
        if writers and (len(writers) > 1 or not {option.name for option in options} <= allowed):
            listed = " and ".join(option.cli for option in options)
            raise ConfigError(
                f"{listed} name the same file, {path}, and one would overwrite the other; "
                "accepted: a separate file for each output"
            )
    for option in OPTIONS:
        path = getattr(config, option.field) if option.writes else None
        problem = path is not None and unwritable_reason(path)
        if problem:
            raise ConfigError(
                f"{option.cli}={path}: {problem}; accepted: a path in a folder this user can create "
                f"and write, or {option.cli}= (empty) to turn it off"
            )


def check_cache_dir(config: SpecbenchConfig, sources: Iterable[str]) -> None:
    """Raise ConfigError when a model of ``sources`` loads through the cache and the cache folder is unusable
    (:func:`~..models.base.cache_dir_problem`), naming where the folder came from; a run whose models never go
    through the cache is not refused for it."""
    from ..models.base import cache_dir_problem, converts_through_cache

    if not any(converts_through_cache(source) for source in sources):
        return

    from ..models.gguf_cache import resolve_cache_dir

    path = resolve_cache_dir(config.cache_dir)
    problem = cache_dir_problem(path)
    if not problem:
        return
    if config.cache_dir is not None:
        named = f"--specbench-cache-dir={path}"
    elif os.environ.get("SPECBENCH_CACHE_DIR"):
        named = f"SPECBENCH_CACHE_DIR={path}"
    else:
        named = f"the default cache folder {path}"
    raise ConfigError(
        f"{named}: {problem}; accepted: a folder this user can create and write, or a "
        "read-only one that already holds the converted models (--specbench-cache-dir or "
        "SPECBENCH_CACHE_DIR)"
    )


def _on_gpu(values: dict[str, tuple[Any, str]], cuda_available: Callable[[], bool]) -> bool:
    if "gpu" in values:
        try:
            return any(device.startswith("cuda") for device in parse_devices(str(values["gpu"][0])))
        except ValueError:
            return False  # reported when the option itself is parsed
    return cuda_available()


def read_settings(get_option: Callable[[str], Any], get_ini: Callable[[str], Any]) -> dict[str, tuple[Any, str]]:
    """Collect the values given: on the command line first, else in the ini file; under each, the option's name
    first, then its earlier names (:attr:`~.options.Option.aliases`, still read)."""
    values: dict[str, tuple[Any, str]] = {}
    for option in OPTIONS:
        for dest, cli in zip((option.dest, *option.alias_dests), (option.cli, *option.alias_clis), strict=True):
            cli_value = get_option(dest)
            if cli_value is not None:
                values[option.name] = (cli_value, cli)
                break
        if option.name in values:
            continue
        for dest in (option.dest, *option.alias_dests):
            ini_value = get_ini(dest)
            if ini_value not in (None, "", []) and not (option.flag and ini_value is False):
                values[option.name] = (ini_value, f"ini {dest}")
                break
    return values


def cuda_available() -> bool:
    """Whether this run will likely have CUDA, to pick the default matrix.

    Importing torch only for this would slow every pytest run in the
    environment by seconds, so unless torch is already loaded the answer
    comes from the installed torch build (``+cpu`` has no CUDA) and the
    presence of the NVIDIA driver. The device itself is resolved by torch later.
    """
    import importlib.metadata
    import sys

    if "torch" in sys.modules:
        return sys.modules["torch"].cuda.is_available()
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return False
    if "+cpu" in version or os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return os.path.exists("/proc/driver/nvidia/version")
