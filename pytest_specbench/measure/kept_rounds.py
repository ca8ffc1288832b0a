"""Rounds that survive a stop: each finished round of a block goes to the rounds file (:mod:`..results.round_log`)
as it ends, and a resumed run continues a block from the rounds a stopped run logged of it.

A round is continued only where it was timed under what decides its numbers now: the same settings, machine and
libraries, few-rows kernel build, kernel forms per case, pairing, and the same cases in the block. Its runs carry
their own paired baselines, so a continued round pairs as honestly as one timed now; the block's stop rules replay
over the kept rounds as they ran. Where anything differs, the block is timed afresh and its rows say why
(``rounds_retimed``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import torch

from ..engine.batched import BatchedGenerationResult
from ..engine.stats import DecodeStats, GenerationResult
from ..results.round_log import LoggedBlock, append_round
from .blocks import BlockTiming, RestoredRound


def encoded(result: GenerationResult | BatchedGenerationResult) -> dict[str, Any]:
    """A run as JSON types: its tokens, its stats, its turns or a batch's rows."""
    stats = dataclasses.asdict(result.stats)
    if isinstance(result, BatchedGenerationResult):
        rows = [encoded(row) for row in result.rows]
        return {"rows": rows, "stats": stats, "padded": result.padded_prompt_length, "layout": result.layout}
    return {
        "sequences": result.sequences.tolist(),
        "prompt_length": result.prompt_length,
        "stats": stats,
        "turns": [encoded(turn) for turn in result.turns],
    }


def decoded(record: dict[str, Any]) -> GenerationResult | BatchedGenerationResult:
    """The run :func:`encoded` wrote."""
    stats = DecodeStats(**record["stats"])
    if "rows" in record:
        rows = [decoded(row) for row in record["rows"]]
        return BatchedGenerationResult(rows, stats, record["padded"], record["layout"])
    sequences = torch.tensor(record["sequences"], dtype=torch.long)
    return GenerationResult(sequences, record["prompt_length"], stats, [decoded(turn) for turn in record["turns"]])


def _round_record(block: BlockTiming, index: int, seconds: float) -> dict[str, Any]:
    """What round ``index`` of ``block`` ran: each case's run and paired baseline, and the round's baselines."""
    runs = {}
    for timed in block.cases:
        if timed.rounds and timed.rounds[-1] == index:
            paired = timed.paired_baselines[-1] if len(timed.paired_baselines) == len(timed.runs) else None
            runs[timed.case.id] = {"run": encoded(timed.runs[-1]), "paired": paired and encoded(paired)}
    baselines = [encoded(run) for run in block.baselines.get(index, ())]
    return {"round": index, "seconds": seconds, "runs": runs, "baselines": baselines}


def restored_round(record: dict[str, Any]) -> RestoredRound:
    runs = {
        case_id: (decoded(entry["run"]), entry["paired"] and decoded(entry["paired"]))
        for case_id, entry in record["runs"].items()
    }
    return RestoredRound(runs, [decoded(run) for run in record["baselines"]], record["seconds"])


@dataclass
class BlockKeeping:
    """One block's rounds: those a stopped run logged and this one continues (``restored``, with the stop rules
    replayed over them), or why it times the block afresh; ``keep`` logs each round this run finishes."""

    restored: list[RestoredRound] = field(default_factory=list)
    retimed_why: str = ""
    keep: Callable[[BlockTiming, int, float], None] | None = None


class RoundKeeper:
    """Logs the rounds of the blocks this process times to ``path`` (None: no log is kept, nor rounds), and offers
    each block the rounds of ``logged`` (read from ``source``, the rounds file of the log being resumed).

    ``settings``: the run's result-changing settings; ``stamp_now``: the machine's and kernel build's state
    (:func:`machine_stamp`), asked only when a block is timed."""

    def __init__(
        self,
        path: Path | None,
        settings: Mapping[str, Any],
        logged: Mapping[str, LoggedBlock] | None = None,
        source: Path | None = None,
        stamp_now: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.path = path
        self.settings = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]
        self.logged = dict(logged or {})
        self.source = source
        self._stamp_now = stamp_now or machine_stamp
        self.kept: dict[str, int] = {}  # by block, the rounds of it in the rounds file, for this run to go on from

    def begin(self, block: str, forms: Mapping[str, str], pairing: str) -> BlockKeeping:
        """The keeping of ``block``, whose cases (by id) run the kernel ``forms`` under ``pairing``."""
        if self.path is None and block not in self.logged:
            return BlockKeeping()
        stamp = {**self._stamp_now(), "settings": self.settings, "pairing": pairing, "forms": dict(forms)}
        # Filed under the block and the cases timed: a scheduler that times a block's cases apart keeps each apart.
        key = f"{block} {','.join(sorted(forms))}"
        logged = self.logged.pop(key, None)
        other_cases = [kept for name, kept in self.logged.items() if name.split(" ")[0] == block]
        differences = _differences(logged.rounds[0].get("stamp") or {}, stamp) if logged else []
        restored = []
        if logged is not None and not differences:
            try:
                restored = [restored_round(record) for record in logged.rounds]
            except (KeyError, TypeError, ValueError, AttributeError) as error:  # another version's, or damaged
                differences = [f"a round that cannot be read ({type(error).__name__}: {error})"]
        if logged is None and other_cases:
            logged, differences = other_cases[0], ["the block's cases differ"]
        why = (
            f"{len(logged.rounds)} round(s) a stopped run logged were timed again: {'; '.join(differences)}"
            if logged and differences
            else ""
        )
        if self.path is None:
            return BlockKeeping(restored, why)
        series = logged.series if restored else secrets.token_hex(4)
        writer = _BlockWriter(self, key, series, stamp, logged.rounds if restored else [])
        if restored and self.source != self.path:
            for record in writer.restored:  # this log's file alone resumes the block, from its first round
                writer.append(record)
        self.kept[block] = len(writer.restored)
        writer.counted_as = block
        return BlockKeeping(restored, why, writer.keep)


@dataclass
class _BlockWriter:
    keeper: RoundKeeper
    block: str  # the rounds file's name of the block: its key and the cases timed
    series: str
    stamp: dict[str, Any]
    restored: list[dict[str, Any]]  # the logged rounds continued, as logged
    _first: bool = True
    counted_as: str = ""  # the block, as :attr:`RoundKeeper.kept` counts it

    def keep(self, block: BlockTiming, index: int, seconds: float) -> None:
        if self._first and block.resumed_rounds < len(self.restored):
            # Fewer rounds continued than were logged (stop rules that changed): a new series from those.
            self.series = secrets.token_hex(4)
            for record in self.restored[: block.resumed_rounds]:
                self.append(record)
        self._first = False
        if self.append(_round_record(block, index, seconds)):
            self.keeper.kept[self.counted_as] = index + 1

    def append(self, record: dict[str, Any]) -> bool:
        """Write one round; a file that cannot be written (a full disk) stops the keeping, not the block."""
        path = self.keeper.path
        if path is None:
            return False
        try:
            append_round(path, {**record, "block": self.block, "series": self.series, "stamp": self.stamp})
            return True
        except OSError as error:
            self.keeper.path = None
            warnings.warn(
                f"pytest-specbench: rounds are no longer kept, {path} cannot be written: {error}", stacklevel=2
            )
            return False


def _differences(logged: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """What of ``logged`` (a round's stamp) differs now, in words."""
    from .resume import machine_changes

    differences = machine_changes(logged.get("machine") or {}, now["machine"])
    named = (
        ("settings", "the settings"),
        ("package", "the package version"),
        ("few_rows_kernel", "the few-rows kernel build"),
        ("pairing", "the pairing"),
    )
    for key, words in named:
        if logged.get(key) != now.get(key):
            differences.append(f"{words} ({logged.get(key)} -> {now.get(key)})")
    logged_forms, forms = logged.get("forms") or {}, now["forms"]
    if not isinstance(logged_forms, dict) or set(logged_forms) != set(forms):
        differences.append(f"the block's cases ({', '.join(sorted(logged_forms))} -> {', '.join(sorted(forms))})")
    else:
        changed = [f"{case} {logged_forms[case]} -> {now}" for case, now in forms.items() if logged_forms[case] != now]
        if changed:
            differences.append(f"the kernel forms or inputs ({'; '.join(changed)})")
    return differences


def machine_stamp() -> dict[str, Any]:
    """The machine, libraries, package version and few-rows kernel build this process times on (the kernel's
    state only where this process tried to build it: no build only to say so)."""
    from ..kernels import few_rows

    return {**_machine(), "few_rows_kernel": few_rows.state_if_tried()}


@cache
def _machine() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    from ..results.fingerprint import machine_fingerprint

    try:
        package = version("pytest-specbench")
    except PackageNotFoundError:
        package = None
    return {"machine": machine_fingerprint(), "package": package}
