"""What ``--specbench-resume`` brings to a run: the logged rows it replays instead of measuring them again,
the logged cases it runs again because their inputs changed, and who measured each replayed row."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..results.log import ResumedLog, read_log, settings_differences
from ..results.schema import CaseResult
from ..settings.config import SpecbenchConfig, result_settings
from .case_inputs import replayable
from .matrix import Case
from .prompts import Prompt


@dataclass
class Resume:
    rows: dict[str, CaseResult] = field(default_factory=dict)  # the rows replayed, by case id
    rerun: dict[str, list[str]] = field(default_factory=dict)  # logged cases run again, by id: what changed
    log: ResumedLog | None = None  # the log read

    def origins(self, cases: set[str]) -> list[dict[str, Any]]:
        """Which earlier runs measured ``cases``: the log's ``{"log", "started", "fingerprint", "cases"}``
        groups cut to them (a case run again now is no earlier run's)."""
        if self.log is None:
            return []
        groups = []
        for group in self.log.origins():
            kept = [case for case in group["cases"] if case in cases]
            if kept:
                groups.append({**group, "cases": kept})
        return groups

    def unmatched_line(self, case_ids: Sequence[str]) -> str:
        """A warning when none of the log's rows is a case of this run (``case_ids``: the matrix): such a resume
        replays nothing and runs every case again, which nothing else would say. "" otherwise."""
        if self.log is None or not self.log.rows or set(self.log.rows) & set(case_ids):
            return ""
        logged = list(self.log.rows)
        return (
            f"none of the {len(logged)} row(s) of {self.log.path} is a case of this run, so none was taken from "
            f"it: the log's cases are {_some(logged)}, this run's {_some(case_ids)}{_label_hint(logged, case_ids)}"
        )


def _some(ids: Sequence[str], most: int = 3) -> str:
    """A few of ``ids``, and how many there are."""
    shown = ", ".join(ids[:most])
    return f"{shown}, ... ({len(ids)} in all)" if len(ids) > most else shown


def _label_hint(logged: Sequence[str], now: Sequence[str]) -> str:
    """Why the ids differ when a prompt's label does: one prompt per category labels a case by its category
    (``-writing``), several by the prompt's id (``-writing-81``)."""
    if {case.rsplit("-", 1)[0] for case in now} & set(logged):
        return (
            "; the log ran one prompt per category (ids ending in the category), this run several: resume with "
            "--specbench-prompts-per-category=1, as the log's run"
        )
    if {case.rsplit("-", 1)[0] for case in logged} & set(now):
        return (
            "; the log ran several prompts per category (ids ending in the prompt id), this run one: resume with "
            "the log's --specbench-prompts-per-category"
        )
    return ""


def load_resume(config: SpecbenchConfig, cases: Sequence[Case], prompts: Sequence[Prompt]) -> Resume:
    """The resume of ``config.resume`` (nothing when not resuming). ValueError (a usage error) for a log that
    cannot be read or was measured with other settings."""
    if config.resume is None:
        return Resume()
    log = read_log(config.resume)  # each row checked against the schema: a bad line is a usage error
    differences = settings_differences(log.settings, result_settings(config))
    if differences:
        raise ValueError(
            f"--specbench-resume={config.resume}: the log was measured with other settings "
            f"({'; '.join(differences)}); resume with the options of the run it logged"
        )
    # Only a row whose case has the same inputs now (models, prompt text, ...) is replayed.
    rows, rerun = replayable(log.rows, cases, config, prompts)
    return Resume(rows=rows, rerun=rerun, log=log)
