"""SpecbenchSession: what one pytest session knows, as plain objects.

Built once in ``pytest_configure`` from the validated config: the pairs and
prompts chosen, the case matrix, and the results collected so far.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import SpecbenchConfig
from .matrix import Case, build_matrix
from .pairs import PairSpec, all_pairs, select_pairs
from .prompts import Prompt, load_prompts, select_prompts


@dataclass
class ResultCollector:
    """Result rows by case id; the last report for a case wins (a rerun replaces it)."""

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, row: dict[str, Any]) -> None:
        self.rows[row["case"]] = row

    @property
    def results(self) -> list[dict[str, Any]]:
        return list(self.rows.values())


@dataclass
class SpecbenchSession:
    config: SpecbenchConfig
    pairs: list[PairSpec]
    prompts: list[Prompt]
    cases: list[Case]
    collector: ResultCollector = field(default_factory=ResultCollector)
    written: list[Path] = field(default_factory=list)
    write_errors: list[str] = field(default_factory=list)
    baseline: dict[str, Any] | None = None  # the loaded baseline document, when gating
    gate_lines: list[str] = field(default_factory=list)

    @classmethod
    def build(cls, config: SpecbenchConfig, rootdir: Path) -> "SpecbenchSession":
        """Raise ValueError (a usage error) for unknown pairs, categories or bad files."""
        defined = all_pairs(rootdir, config.pairs_file)
        pairs = select_pairs(defined, config.pairs or tuple(defined))
        all_prompts = load_prompts(config.prompt_file)
        prompts = select_prompts(all_prompts, config.prompt_categories or None, config.prompts_per_category)
        baseline = None
        if config.baseline is not None:
            from .gate import load_baseline

            baseline = load_baseline(config.baseline)
        return cls(config=config, pairs=pairs, prompts=all_prompts,
                   cases=build_matrix(pairs, config.ks, prompts), baseline=baseline)
