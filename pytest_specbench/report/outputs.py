"""Writing a run's results to their files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def write_figures(directory: Path, results: Sequence[dict[str, Any]]) -> None:
    """The run's PNG figures; matplotlib is the ``plots`` extra, imported only here."""
    try:
        from ..report.plots import write_plots
    except ImportError as error:
        raise ImportError(f"{error}; install the plots extra: pip install 'pytest-specbench[plots]'") from None
    write_plots(results, directory)
