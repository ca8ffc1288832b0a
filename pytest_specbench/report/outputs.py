"""The files of a run, in one table: the end of a pytest run and ``python -m pytest_specbench merge`` write
them alike, from the run's document (:class:`~..results.run_document.RunDocument`: the run's, or the merged one).
The front end asks for the table and hands it to results/ to write (results/run_files.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..atomic import write_atomic
from ..results.gate import save_baseline
from ..results.run_document import RunDocument

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


def outputs(paths: OutputPaths, document: RunDocument, command: str | None = None) -> tuple[Output, ...]:
    """The table: CSV, JSON, baseline, figures and report, each written from ``document`` (its rows, options,
    fingerprint and versions); ``command`` is the command line the report quotes. The JSON is the document's
    :meth:`~RunDocument.to_json` as it is when written."""
    results = document.results
    env = {"fingerprint": document.fingerprint, "versions": document.versions}
    return (
        Output("CSV", paths.csv, lambda path: write_atomic(path, csv_text(results))),
        Output("JSON", paths.json, lambda path: write_atomic(path, strict_json(document.to_json()))),
        # The baseline records the run's result-changing settings, from its options, for the gate to check.
        Output(
            "baseline", paths.baseline, lambda path: save_baseline(path, results, {**env, "options": document.options})
        ),
        Output("figures", paths.figures, lambda path: write_figures(path, results)),
        Output(
            "report",
            paths.report,
            lambda path: write_atomic(
                path, report_markdown(results, document.options, env, paths.figures, path, command)
            ),
        ),
    )


def write_outputs(
    paths: OutputPaths, document: RunDocument, command: str | None = None
) -> tuple[list[Path], list[str]]:
    """Write every output that has a path; returns the paths written and, for each that failed, the error.

    One failed file (a full disk, a NaN refused as strict JSON, matplotlib missing) must not cost the others.
    """
    return write_each(outputs(paths, document, command))
