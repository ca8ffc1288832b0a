"""SpecbenchSession: one pytest session's benchmark run, from the case matrix to the files and the gate.

Built once in ``pytest_configure`` from the validated config. The plugin's
hooks hand it what pytest reports (collected items, test reports) and ask it
to finish (files, gate, exit status) and to summarise; it knows no hook.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import SpecbenchConfig
from .matrix import Case, build_matrix, shard_pairs
from .pairs import PairSpec, all_pairs, select_pairs
from .prompts import Prompt, load_prompts, select_prompts

#: the user-property name under which a case's result row travels in its test report
RESULT_KEY = "specbench_result"


@dataclass
class SpecbenchSession:
    config: SpecbenchConfig
    pairs: list[PairSpec]  # the pairs this run selected
    defined: dict[str, PairSpec]  # every pair defined (built in, pyproject, pairs file)
    prompts: list[Prompt]  # every prompt of the file: padding for --specbench-context-tokens uses them all
    cases: list[Case]
    baseline: dict[str, Any] | None = None  # the loaded baseline document, when gating
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # by case id; a rerun replaces its row
    cases_collected: int = 0  # specbench cases collected, before -k/-m deselect
    cases_run: int = 0
    failed_cases: set[str] = field(default_factory=set)
    written: list[Path] = field(default_factory=list)
    write_errors: list[str] = field(default_factory=list)
    gate_lines: list[str] = field(default_factory=list)
    command: str | None = None  # the pytest command line, for the report
    _availability: dict[tuple[str, str | None], str | None] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, config: SpecbenchConfig, rootdir: Path) -> "SpecbenchSession":
        """Raise ValueError (a usage error) for unknown pairs, categories or bad files."""
        defined = all_pairs(rootdir, config.pairs_file)
        pairs = select_pairs(defined, config.pairs or tuple(defined))
        if config.shard is not None:
            pairs = shard_pairs(pairs, *config.shard)
        all_prompts = load_prompts(config.prompt_file)
        # The CPU default categories are the shipped suite's; a user's own file runs whole unless told.
        categories = config.prompt_categories or None
        if config.prompt_file is not None and "prompts" not in config.given:
            categories = None
        prompts = select_prompts(all_prompts, categories, config.prompts_per_category)
        baseline = None
        if config.baseline is not None:
            from .gate import load_baseline

            baseline = load_baseline(config.baseline)
        return cls(config=config, pairs=pairs, defined=defined, prompts=all_prompts,
                   cases=build_matrix(pairs, config.ks, prompts), baseline=baseline)

    # --- what pytest reports -----------------------------------------------------

    def unavailable_reason(self, pair: PairSpec, probe_hub: bool = True) -> str | None:
        """Why ``pair`` cannot run here (its first missing model, with the command that fetches it), or None.

        ``probe_hub=False`` looks at local files only: a hub model not in the cache is then unavailable.
        """
        from .models.loading import model_available

        for source in pair.sources():
            revision = pair.revision if source == pair.target else None
            key = (source, revision, probe_hub)
            if key not in self._availability:
                self._availability[key] = model_available(source, revision=revision, probe_hub=probe_hub,
                                                          cache_dir=self.config.cache_dir)
            if self._availability[key]:
                return f"{pair.name}: {self._availability[key]}"
        return None

    def empty_selection_lines(self) -> list[str]:
        """Why nothing ran when -k/-m matched no case: what this machine's matrix holds, and how to add more."""
        ks = ", ".join(str(k) for k in self.config.ks)
        prompts = ", ".join(dict.fromkeys(case.prompt_label for case in self.cases))
        in_matrix = {pair.name for pair in self.pairs}
        ready, other = [], []
        for name, pair in self.defined.items():
            reason = self.unavailable_reason(pair, probe_hub=False)
            if reason is not None:
                other.append(reason)
            elif name in in_matrix:
                ready.append(name)
            else:
                other.append(f"{name}: not in --specbench-pairs")
        lines = [f"no specbench case matched the selection (-k/-m); this run's matrix has k values {ks}, "
                 f"prompts {prompts}, and the pairs {', '.join(ready) or 'none'} ready to run",
                 "add k values with --specbench-k=1,2,4,8,16, prompts with --specbench-prompts, "
                 "pairs with --specbench-pairs; not ready here:"]
        lines += [f"  {line}" for line in other]
        return lines

    @property
    def case_ids(self) -> set[str]:
        return {case.id for case in self.cases}

    def count_collected(self, has_case: Iterable[bool]) -> None:
        """Items collected before -k/-m deselect: lets the summary explain a selection that matched none."""
        self.cases_collected += sum(has_case)

    def add_report(self, case_id: str, when: str, failed: bool, is_case: bool,
                   properties: Sequence[tuple[str, Any]]) -> None:
        """One test report: count the case, remember a failure, keep the result row it carries."""
        if when == "setup" and is_case:
            self.cases_run += 1
        if failed and case_id in self.case_ids:
            self.failed_cases.add(case_id)  # a crashed worker's case arrives only as a failure
        if when != "call":
            return
        for name, value in properties:
            if name == RESULT_KEY:
                self.rows[value["case"]] = value

    @property
    def results(self) -> list[dict[str, Any]]:
        return list(self.rows.values())

    @property
    def missing(self) -> list[str]:
        """Cases that ran but left no result (an error before measuring, a crashed worker)."""
        return sorted(self.failed_cases - set(self.rows))

    # --- the end of the run ------------------------------------------------------

    def finish(self) -> bool:
        """Write the files and run the gate; True when the run must fail (a file not written, a regression)."""
        failed = False
        if self.results:
            failed |= self._write_outputs()
        if self.baseline is not None:
            failed |= self._gate()
        return failed

    def _write_outputs(self) -> bool:
        from . import gate
        from .atomic import write_atomic
        from .report import csv_text, environment, json_text
        from .report_md import report_markdown

        settings, results = self.config, self.results
        env = environment()
        outputs: tuple[tuple[Path | None, Callable[[], None]], ...] = (
            (settings.csv_path, lambda: write_atomic(settings.csv_path, csv_text(results))),
            (settings.json_path, lambda: write_atomic(settings.json_path,
                                                      json_text(results, settings.raw, env, self.missing))),
            (settings.save_baseline, lambda: gate.save_baseline(settings.save_baseline, results, env)),
            (settings.plots_dir, lambda: write_figures(settings.plots_dir, results)),
            (settings.report_path, lambda: write_atomic(settings.report_path, report_markdown(
                results, settings.raw, env, settings.plots_dir, settings.report_path, self.command))),
        )
        failed = False
        for path, write in outputs:
            if path is None:
                continue
            try:
                write()
                self.written.append(path)
            except (OSError, ValueError, ImportError) as error:  # one failed file must not cost the others
                self.write_errors.append(f"could not write {path}: {error}")
                failed = True
        return failed

    def _gate(self) -> bool:
        from . import gate
        from .fingerprint import fingerprint_differences, machine_fingerprint

        settings, results = self.config, self.results
        differences = fingerprint_differences(self.baseline.get("fingerprint", {}), machine_fingerprint())
        regressions = gate.compare(self.baseline, results, max_acceptance_drop=settings.max_acceptance_drop,
                                   max_speedup_drop=settings.max_speedup_drop, allow_missing=settings.allow_missing,
                                   same_machine=not differences)
        self.gate_lines = gate.gate_summary_lines(regressions, gate.new_cases(self.baseline, results),
                                                  gate.compared_count(self.baseline, results), settings.baseline,
                                                  differences)
        return bool(regressions)

    def summary_sections(self) -> list[tuple[str, list[tuple[str, bool]]]]:
        """``(title, [(line, is_error), ...])`` sections for the terminal; none when nothing was benchmarked."""
        if not (self.cases_collected or self.cases_run or self.rows or self.gate_lines):
            return []
        from .report import summary_lines

        if self.cases_collected and not self.cases_run:
            lines = [(line, False) for line in self.empty_selection_lines()]
        else:
            lines = [(line, False) for line in summary_lines(self.results, self.config.ci_target)]
        if self.missing:
            lines.append((f"no result for {len(self.missing)} case(s): {', '.join(self.missing)}", False))
        lines += [(f"results written to {path}", False) for path in self.written]
        lines += [(line, True) for line in self.write_errors]
        sections = [("specbench summary", lines)]
        if self.gate_lines:
            sections.append(("specbench gate", [(line, False) for line in self.gate_lines]))
        return sections


def write_figures(directory: Path, results: Sequence[dict[str, Any]]) -> None:
    """The run's PNG figures; matplotlib is the ``plots`` extra, imported only here."""
    try:
        from .plots import write_plots
    except ImportError as error:
        raise ImportError(f"{error}; install the plots extra: pip install 'pytest-specbench[plots]'") from None
    write_plots(results, directory)
