"""The files of a run, in one table: the end of a pytest run and ``python -m pytest_specbench merge`` write
them alike, from the run's JSON document (:func:`.summary.run_document`, or the merged document)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..atomic import write_atomic
from ..results.gate import save_baseline

# OutputPaths and Output are named here too: the table below and ``merge`` use them with it.
from ..results.run_files import Output, OutputPaths, write_each
from ..results.schema import CaseResult
from ..results.strict_json import strict_json
from .markdown import report_markdown
from .summary import csv_text


def write_figures(directory: Path, results: Sequence[CaseResult]) -> None:
    """The run's PNG figures; matplotlib is the ``plots`` extra, imported only here."""
    try:
        from .plots import write_plots
    except ImportError as error:
        raise ImportError(f"{error}; install the plots extra: pip install 'pytest-specbench[plots]'") from None
    write_plots(results, directory)


def outputs(paths: OutputPaths, document: dict[str, Any], command: str | None = None) -> tuple[Output, ...]:
    """The table: CSV, JSON, baseline, figures and report, each written from ``document`` (its ``results``,
    ``options``, ``fingerprint`` and ``versions``); ``command`` is the command line the report quotes. The JSON
    is the document as it is; the other writers take its rows typed."""
    results = [CaseResult.from_row(row) for row in document["results"]]
    env = {"fingerprint": document.get("fingerprint", {}), "versions": document.get("versions", {})}
    return (
        Output("CSV", paths.csv, lambda path: write_atomic(path, csv_text(results))),
        Output("JSON", paths.json, lambda path: write_atomic(path, strict_json(document))),
        # The baseline records the run's result-changing settings, from its options, for the gate to check.
        Output(
            "baseline",
            paths.baseline,
            lambda path: save_baseline(path, results, {**env, "options": document.get("options", {})}),
        ),
        Output("figures", paths.figures, lambda path: write_figures(path, results)),
        Output(
            "report",
            paths.report,
            lambda path: write_atomic(
                path, report_markdown(results, document.get("options", {}), env, paths.figures, path, command)
            ),
        ),
    )


def write_outputs(
    paths: OutputPaths, document: dict[str, Any], command: str | None = None
) -> tuple[list[Path], list[str]]:
    """Write every output that has a path; returns the paths written and, for each that failed, the error.

    One failed file (a full disk, a NaN refused as strict JSON, matplotlib missing) must not cost the others.
    """
    return write_each(outputs(paths, document, command))
