"""What a run's :class:`~.session.SpecbenchSession` is built from: the pairs, prompts and case matrix its config
selects, the baseline it gates against and the log it resumes, each checked before any model loads."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..cases.matrix import Case, build_matrix, shard_pairs
from ..cases.pairs import all_pairs, default_pair_names, select_pairs
from ..cases.prompts import DEFAULT_PROMPT_FILE, Prompt, load_prompts, sample_line, select_prompts
from ..measure.resume import load_resume
from ..results.run_files import RunFiles
from ..settings import axes
from ..settings.config import SpecbenchConfig
from ..settings.engines import runs_own_loop
from .availability import PairAvailability
from .session import SpecbenchSession
from .signals import SignalStop


def build_session(
    config: SpecbenchConfig, rootdir: Path, controller: bool = True, command: str | None = None
) -> SpecbenchSession:
    """The session of ``config``'s run. ValueError (a usage error) for unknown pairs or categories, bad files,
    a baseline or a resumed log of other settings. ``rootdir`` is pytest's (its git commit names the run in
    the history), ``command`` the pytest command line; only the ``controller`` handles signals."""
    defined = all_pairs(rootdir, config.pairs_file)  # every pair (built in, pyproject, pairs file)
    pairs = select_pairs(defined, config.pairs or default_pair_names(defined, config.on_gpu)[0])
    if config.shard is not None:
        pairs = shard_pairs(pairs, *config.shard)
    all_prompts = load_prompts(config.prompt_file)
    prompts = selected_prompts(config, all_prompts)
    cases = build_matrix(pairs, prompts=prompts, **axes.values_to_run(config))
    check_forced_kernel(config, cases)
    return SpecbenchSession(
        config=config,
        pairs=pairs,
        prompts=all_prompts,
        cases=cases,
        availability=PairAvailability(config, defined),
        files=RunFiles(config, command, rootdir),
        signals=SignalStop(active=controller),
        baseline=load_checked_baseline(config),
        resume=load_resume(config, cases, all_prompts),
        prompt_sample=prompt_sample_line(config, all_prompts, prompts),
    )


def check_forced_kernel(config: SpecbenchConfig, cases: Sequence[Case]) -> None:
    """ValueError (a usage error, before any model loads) where ``--specbench-kernels=rows`` asks for the
    few-rows kernel, a native case runs on the CPU, and the kernel cannot be built here (building it if need be)."""
    on_cpu = "cpu" in config.devices or (not config.devices and not config.on_gpu)
    if config.kernels != "rows" or not on_cpu or not any(runs_own_loop(case.engine) for case in cases):
        return
    from ..kernels import few_rows

    reason = few_rows.unavailable_reason()
    if reason:
        raise ValueError(
            f"--specbench-kernels=rows: the few-rows kernel cannot run here: {reason}; accepted here: auto "
            "(torch's own kernels where the few-rows kernel cannot run, said in the summary), column, linear"
        )


def selected_prompts(config: SpecbenchConfig, all_prompts: list[Prompt]) -> list[Prompt]:
    """The prompts the matrix runs: the CPU default categories are the shipped suite's, so a user's own
    prompt file runs whole unless --specbench-prompts names categories (or groups)."""
    categories = config.prompt_categories or None
    if config.prompt_file is not None and "prompts" not in config.given:
        categories = None
    return select_prompts(all_prompts, categories, config.prompts_per_category, sample_seed(config))


def sample_seed(config: SpecbenchConfig) -> int | None:
    """The seed of the prompts' per-category sample: the run's (--specbench-seed) when a number per category was
    given; None (each category's first prompts) for the CPU default, so a CPU run keeps the shipped suite's
    short first prompts."""
    return config.seed if "prompts-per-category" in config.given else None


def prompt_sample_line(config: SpecbenchConfig, all_prompts: list[Prompt], selected: list[Prompt]) -> str:
    """The summary's line saying which prompts of the file the run's matrix holds, and how they were drawn."""
    source = str(config.prompt_file) if config.prompt_file is not None else f"the shipped {DEFAULT_PROMPT_FILE.name}"
    line = sample_line(all_prompts, selected, config.prompts_per_category, sample_seed(config), source)
    return line + unpadded_note(config.context_tokens, all_prompts)


def unpadded_note(context_tokens: int | None, all_prompts: list[Prompt]) -> str:
    """What the summary adds when --specbench-context-tokens cannot pad: padding is the file's other prompts, and
    a file of one prompt has none, so a shorter prompt (or turn) runs at its own length, not at N."""
    if context_tokens is None or len(all_prompts) > 1:
        return ""
    return (
        f"; --specbench-context-tokens={context_tokens} only cuts here: the file holds no other prompt to pad a "
        "shorter prompt (or turn) with, so that one runs at its own length"
    )


def load_checked_baseline(config: SpecbenchConfig) -> dict[str, Any] | None:
    """The --specbench-baseline document, refused (ValueError) when it was saved with other settings; None
    when the run does not gate."""
    if config.baseline is None:
        return None
    from ..results.gate import check_baseline_settings, load_baseline

    baseline = load_baseline(config.baseline)
    check_baseline_settings(baseline, config, config.baseline)
    return baseline
