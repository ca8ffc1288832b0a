"""A run's record, typed: what its JSON file holds, composed by the front end that ran or merged it (the
session at the end of a pytest run, ``python -m pytest_specbench merge``), its answers built by report/, and
written by the outputs' table. One type, read by attribute; :meth:`RunDocument.to_json` is the file."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .schema import CaseResult


@dataclass
class RunDocument:
    """The record of one run (or of merged shards). ``answer`` and ``batch`` are the typed answers as JSON
    (report/answer.py, report/batch.py); ``results`` the rows, typed. The fields after them are what the run that
    wrote it adds: None where a document has no such part (a merged one has no history entry of its own)."""

    fingerprint: dict[str, Any]
    versions: dict[str, Any]
    options: dict[str, Any]
    interrupted: str | None
    missing_cases: list[str]
    resumed_cases: list[str]
    answer: dict[str, Any]
    batch: list[dict[str, Any]]
    results: list[CaseResult]
    #: the shards a merged document holds, each with its machine
    merged_from: list[dict[str, Any]] | None = None
    #: which machine measured the rows taken from a log (--specbench-resume), by the run that measured them
    resumed_from: list[dict[str, Any]] | None = None
    #: the cases of a block a signal stopped, lost with it
    lost_mid_block: list[str] | None = None
    #: what went wrong so far (a log on a full disk); the run's own record has it, with its history entry
    errors: list[str] | None = None
    history_entry: str | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        """The document as its JSON file holds it: the machine, the options, how the run ended, the answers, the
        rows, then the parts the run added (the history entry wherever the errors are: null where none)."""
        document: dict[str, Any] = {
            "fingerprint": self.fingerprint,
            "versions": self.versions,
            "options": self.options,
            "interrupted": self.interrupted,
            "missing_cases": list(self.missing_cases),
            "resumed_cases": list(self.resumed_cases),
            "answer": self.answer,
            "batch": self.batch,
            "results": [row.to_row() for row in self.results],
        }
        for name in ("merged_from", "resumed_from", "lost_mid_block"):
            if getattr(self, name) is not None:
                document[name] = getattr(self, name)
        if self.errors is not None:
            document["history_entry"] = self.history_entry
            document["errors"] = list(self.errors)
        return document
