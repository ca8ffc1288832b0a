"""What ``--specbench-resume`` brings to a run: the logged rows it replays instead of measuring them again,
the logged cases it runs again because their inputs changed, and who measured each replayed row."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..cases.matrix import Case
from ..cases.prompts import Prompt
from ..results.log import ResumedLog, read_log, settings_differences
from ..results.round_log import LoggedBlock, read_rounds, rounds_path
from ..results.schema import CaseResult
from ..settings.config import SpecbenchConfig, result_settings
from .case_inputs import replayable


@dataclass
class Resume:
    rows: dict[str, CaseResult] = field(default_factory=dict)  # the rows replayed, by case id
    rerun: dict[str, list[str]] = field(default_factory=dict)  # logged cases run again, by id: what changed
    log: ResumedLog | None = None  # the log read
    # rows another machine, library or kernel build measured: never replayed, carried where their case does not run
    stale: dict[str, CaseResult] = field(default_factory=dict)
    # by block, the rounds a run stopped mid-block logged (:mod:`.kept_rounds` continues them)
    rounds: dict[str, LoggedBlock] = field(default_factory=dict)

    def carried(self, selected: Collection[str]) -> dict[str, CaseResult]:
        """The logged rows the new log keeps: those replayed, and the stale ones of cases this run does not run
        (``selected``), so that no finished result is lost."""
        return {**{case: row for case, row in self.stale.items() if case not in selected}, **self.rows}

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
    # Only a row whose case has the same inputs now (models, prompt text, ...) is replayed, on the same machine
    # and libraries, with the same kernel.
    rows, rerun = replayable(log.rows, cases, config, prompts)
    stale = _measured_otherwise(log, rows, {case.id for case in cases}, rerun)
    return Resume(rows=rows, rerun=rerun, log=log, stale=stale, rounds=read_rounds(rounds_path(config.resume)))


def _measured_otherwise(
    log: ResumedLog, rows: dict[str, CaseResult], ours: Collection[str], rerun: dict[str, list[str]]
) -> dict[str, CaseResult]:
    """Take out of ``rows`` those of this run's cases (``ours``) that another machine, library version or kernel
    build measured, noting in ``rerun`` what differs; return them."""
    from ..results.fingerprint import machine_fingerprint

    # Each row against the machine that measured it: a row the log's run carried keeps its own run's.
    measured_on = {case: group["fingerprint"] or {} for group in log.origins() for case in group["cases"]}
    mine = [case_id for case_id in rows if case_id in ours]
    now = machine_fingerprint() if mine else {}
    stale = {}
    for case_id in mine:
        changes = machine_changes(measured_on.get(case_id, log.fingerprint), now) + kernel_changes(rows[case_id])
        if changes:
            rerun[case_id] = changes
            stale[case_id] = rows.pop(case_id)
    return stale


def machine_changes(logged: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The machine and library entries that decide numerics (results/fingerprint.py) in which ``logged`` (the
    machine that measured a row) differs from ``now``'s, in words; none for a row without a fingerprint."""
    from ..results.fingerprint import fingerprint_differences

    # The kernel build is checked row by row (:func:`kernel_changes`), where it is known for every row.
    differences = fingerprint_differences(logged, now, leave_out=("few_rows_kernel",))
    return [f"machine or libraries ({'; '.join(differences)})"] if differences else []


def kernel_changes(row: CaseResult) -> list[str]:
    """Whether the few-rows kernel that computed ``row`` (its ``few_rows_kernel``: a build, or why none) is
    not the one this run would use; none where the row used no such kernel."""
    if not row.few_rows_kernel:
        return []
    from ..kernels import few_rows

    now = few_rows.recorded_state()
    return [] if row.few_rows_kernel == now else [f"few-rows kernel ({row.few_rows_kernel} -> {now})"]
