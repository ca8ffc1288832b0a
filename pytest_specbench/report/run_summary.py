"""The text of a run's terminal summary: what ran (or why nothing did), what was resumed, skipped, missing
or interrupted, which files were written or refused, and the gate's lines.

Built from a :class:`RunSnapshot` of the ended run; the plugin writes each ``(line, is_error)`` of each
section, an error in red.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..results.round_log import rounds_path
from ..results.run_files import RunFiles
from ..results.schema import CaseResult
from ..results.tally import CaseRows, CaseTally, RunEnding
from ..settings.config import SpecbenchConfig

if TYPE_CHECKING:
    from ..cases.matrix import Case

#: one line of the summary, and whether it is an error (red)
Line = tuple[str, bool]


@dataclass(frozen=True)
class RunSnapshot:
    """What the summary tells of an ended run."""

    config: SpecbenchConfig
    cases: Sequence[Case]  # the matrix, in order
    tally: CaseTally
    rows: CaseRows  # the finished cases' rows, measured here or replayed from the resumed log
    rerun: Mapping[str, Sequence[str]]  # logged cases run again, by id: what changed
    ending: RunEnding  # what ended the run early, the gate's outcome
    files: RunFiles
    empty_selection: Callable[[], list[str]]  # why -k/-m matched no case (probes local models: only then)
    left_out: Sequence[str] = ()  # built-in pairs the default selection left out on this device
    prompt_sample: str = ""  # which prompts of the file run, and how they were drawn (a seeded sample per category)
    unmatched_resume: str = ""  # a warning when no row of the resumed log is a case of this run

    @property
    def results(self) -> list[CaseResult]:
        """The rows, in matrix order."""
        return self.rows.in_order()

    @property
    def missing(self) -> list[str]:
        return self.tally.missing(self.rows.by_case)


def summary_sections(run: RunSnapshot) -> list[tuple[str, list[Line]]]:
    """``(title, [(line, is_error), ...])`` sections for the terminal; none when nothing was benchmarked."""
    tally, files, gate = run.tally, run.files, run.ending.gate
    if not (tally.collected or tally.began or run.rows.by_case or gate is not None or files.refusals or tally.skipped):
        return []
    lines = _plain([run.prompt_sample] if run.prompt_sample else []) + _headline(run) + _plain(_left_out_lines(run))
    lines += _plain(_budget_lines(run))
    replayed = run.rows.replayed
    if replayed:
        lines.append((f"{len(replayed)} case(s) taken from {run.config.resume}, not run again", False))
    if run.unmatched_resume:
        lines.append((run.unmatched_resume, True))
    lines += _plain(_rerun_lines(run)) + _ending(run) + _plain(_file_lines(run))
    lines += [(line, True) for line in files.refusals + files.errors]
    sections = [("specbench summary", lines)]
    if gate is not None:
        sections.append(("specbench gate", _plain(gate.lines)))
    return sections


def _plain(lines: Sequence[str]) -> list[Line]:
    return [(line, False) for line in lines]


def _headline(run: RunSnapshot) -> list[Line]:
    """The results, or why there are none: every case skipped, or a selection that matched no case; then the
    pairs whose every case was skipped."""
    tally = run.tally
    skipped_pairs = _skipped_pair_lines(run)
    interrupted = run.ending.interrupted
    if tally.measured_nothing(run.rows.by_case) and tally.all_skipped and not interrupted:
        return _plain(
            [
                f"no specbench case ran: all {len(tally.selected)} selected case(s) were skipped",
                *skipped_pairs,
                "no file was written: the results files and log of an earlier run are left as they were",
            ]
        )
    if tally.collected and not tally.began and not interrupted:
        return _plain(run.empty_selection() + skipped_pairs)
    from .summary import summary_lines

    return _plain(summary_lines(run.results, run.config.ci_target, run.config.category_groups) + skipped_pairs)


def _ending(run: RunSnapshot) -> list[Line]:
    """How the run ended early, and the cases left without a result (errors when it was interrupted)."""
    lines, interrupted, finished = [], run.ending.interrupted, len(run.rows.by_case)
    if interrupted:
        when = " while its files were written," if run.ending.while_writing else ""
        lines.append(
            (
                f"run interrupted ({interrupted}){when} with {finished} of "
                f"{len(run.tally.selected) or finished} case(s) finished",
                True,
            )
        )
    lost, kept = run.ending.lost_mid_block, run.ending.kept_rounds
    if lost:
        together = f"it stopped mid-block: {', '.join(lost)} are timed together and finish together"
        if kept and run.config.log_path is not None:
            rounds = f"{kept} round{'s' if kept > 1 else ''}"
            together += (
                f"; its {rounds} that finished are kept in {rounds_path(run.config.log_path)}, and "
                "--specbench-resume goes on from them"
            )
        elif run.config.log_path is None:
            together += ", so their rounds so far are lost (no results log, --specbench-log, keeps them)"
        else:
            together += "; none of its rounds had finished"
        lines.append((together, True))
    missing = run.missing
    if missing:
        lines.append((f"no result for {len(missing)} case(s): {', '.join(missing)}", bool(interrupted)))
        if run.config.log_path is not None and (finished or kept):
            lines.append((f"to run only those: the same command with --specbench-resume={run.config.log_path}", False))
    return lines


def _file_lines(run: RunSnapshot) -> list[str]:
    """The files written, and the run's folder in the history (or why it has none)."""
    files, config = run.files, run.config
    lines = [f"results written to {path}" for path in files.written]
    if files.history_entry is not None:
        from ..results.history import compare_last_command, number_of

        before = (
            f" (compare it with the run before: {compare_last_command(config.history_dir)})"
            if number_of(files.history_entry) > 1
            else ""
        )
        lines.append(f"run saved in the history: {files.history_entry}{before}")
    elif run.rows.replayed and not run.rows.measured_here and config.history_dir is not None:
        lines.append(f"not saved in the history: every result was taken from {config.resume}, none was measured")
    return lines


def _rerun_lines(run: RunSnapshot) -> list[str]:
    """One line naming the logged cases run again because their inputs changed, and what changed."""
    changed = [case.id for case in run.cases if case.id in run.rerun and case.id in run.tally.selected]
    if not changed:
        return []
    by_change: dict[str, list[str]] = {}
    for case in changed:
        by_change.setdefault(", ".join(run.rerun[case]), []).append(case)
    named = "; ".join(f"{', '.join(cases)} ({change})" for change, cases in by_change.items())
    return [
        f"{len(changed)} case(s) of {run.config.resume} run again, not taken from it: what they were "
        f"measured with changed since it was logged: {named}"
    ]


def _left_out_lines(run: RunSnapshot) -> list[str]:
    """A line naming the built-in pairs the default selection left out, and how to ask for them."""
    from ..cases.pairs import left_out_note

    return [left_out_note(run.left_out)] if run.left_out else []


def _budget_lines(run: RunSnapshot) -> list[str]:
    """A line when the run's budget was spent before every block ran as long as it needed."""
    from ..measure.blocks import RUN_BUDGET
    from ..measure.budget import NOT_TIMED_FOR_BUDGET, describe_duration

    config = run.config
    if config.run_budget is None:
        return []
    budget = describe_duration(config.run_budget)[6:]
    lines = []
    short = [row for row in run.results if row.timing_stop == RUN_BUDGET]
    if short:
        blocks = len({row.block for row in short})
        lines.append(
            f"the run's budget (--specbench-budget, {budget}) was spent: {len(short)} case(s) in {blocks} block(s) "
            f"ran only their {config.min_rounds} minimum rounds; a longer --specbench-budget (or off) times them to "
            "the interval target"
        )
    untimed = [
        case
        for case, reason in run.tally.skipped.items()
        if reason.removeprefix("Skipped: ").startswith(NOT_TIMED_FOR_BUDGET)
    ]
    if untimed:
        lines.append(
            f"the run's budget (--specbench-budget, {budget}) would have been overrun: {len(untimed)} case(s) were "
            "not timed, as the blocks before them ran slower than the plan estimated (each skipped case says by how "
            "much); a longer --specbench-budget (or none), or --specbench-resume with this run's log, times them"
        )
    return lines


def _skipped_pair_lines(run: RunSnapshot) -> list[str]:
    """``pair: N case(s) skipped: reason`` for each pair whose selected cases were all skipped; the reason
    names what fixes it (the ``hf download`` of a missing model, the option)."""
    skipped = run.tally.skipped
    by_pair: dict[str, list[str]] = {}
    for case in run.cases:
        if case.id in run.tally.selected or case.id in skipped:
            by_pair.setdefault(case.pair.name, []).append(case.id)
    lines = []
    for pair, cases in by_pair.items():
        if not set(cases) <= set(skipped):
            continue
        reasons = Counter(_without_prefix(skipped.get(case, ""), pair) for case in cases)
        if len(reasons) == 1:
            lines.append(f"{pair}: {len(cases)} case(s) skipped: {next(iter(reasons))}")
        else:
            lines.append(
                f"{pair}: {len(cases)} case(s) skipped: "
                + "; ".join(f"{reason} ({count} case(s))" for reason, count in reasons.most_common())
            )
    return lines


def _without_prefix(reason: str, pair: str) -> str:
    """A skip reason without pytest's ``Skipped: `` and the pair's own name, which the summary line starts with."""
    reason = reason.removeprefix("Skipped: ").strip()
    return reason.removeprefix(f"{pair}: ") or "no reason given"
