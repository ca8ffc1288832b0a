"""One ``--specbench-*`` setting's declaration: the option table (settings/options.py) holds most, and an axis that
declares its own option (settings/axes.py) holds its."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Option:
    """One setting, declared once: ``--specbench-<name>`` on the command line, ``specbench_<name>`` in ini.

    ``field`` is the SpecbenchConfig attribute it fills and ``parse`` turns the raw
    string into its value (raising ValueError that says what is accepted).
    """

    name: str
    field: str
    help: str
    parse: Callable[[str], Any] | None = None  # None for a flag
    default: str | None = None
    cpu_default: str | None = None  # a smaller default when the run is on CPU
    metavar: str | None = None
    unset: Any = None  # the value when neither given nor defaulted (False for a flag)
    # A file this run writes: probed at configure time and never shared with another file option.
    writes: bool = False
    # A file this run reads: no output may overwrite it...
    reads: bool = False
    # ...except the input option named here: the file this output updates (a baseline saved over the one
    # the run is gated against, a log that goes on from the log it resumes).
    may_share: str | None = None
    # Changes what a case measures: a resumed run must use the same value as the log it resumes.
    changes_results: bool = False
    # A list whose order changes nothing a case measures (only the order cases run in): compared as a set.
    order_free: bool = False
    # A list of one item is recorded as that item: what the option recorded before it took a list, so the
    # baselines and logs of those runs still compare equal.
    single_as_item: bool = False
    # Earlier names of the option (``head-kernel``): each still parses, on the command line and in ini, and what a
    # stored run recorded under one reads as this option's setting (:func:`current_setting_names`).
    aliases: tuple[str, ...] = ()

    @property
    def flag(self) -> bool:
        """A boolean switch (store_true on the command line, bool in ini)."""
        return self.parse is None

    @property
    def cli(self) -> str:
        return f"--specbench-{self.name}"

    @property
    def dest(self) -> str:
        return "specbench_" + self.name.replace("-", "_")

    @property
    def alias_clis(self) -> tuple[str, ...]:
        return tuple(f"--specbench-{alias}" for alias in self.aliases)

    @property
    def alias_dests(self) -> tuple[str, ...]:
        return tuple("specbench_" + alias.replace("-", "_") for alias in self.aliases)
