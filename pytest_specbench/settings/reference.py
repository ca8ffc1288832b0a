"""The options reference, docs/options.md, rendered from the option table.

Regenerate the page with ``python -m pytest_specbench.settings.reference > docs/options.md``;
``tests/test_readme.py`` checks that the page equals :func:`options_markdown`.
Imports nothing but this layer and the standard library.
"""

from __future__ import annotations

from .options import OPTIONS, Option

REGENERATE = "python -m pytest_specbench.settings.reference > docs/options.md"

_PREAMBLE = f"""\
# Options

<!-- Generated from pytest_specbench/settings/options.py; do not edit by hand. Regenerate with:
{REGENERATE} -->

Every option is also an ini key under `[tool.pytest.ini_options]` (or `pytest.ini`); the command
line wins over the ini file, which wins over the default. The CPU default applies when the run is
on a CPU; any value you give wins over it. A default of \u2014 means none is fixed: the meaning says
what happens when the option is left out. Bad values stop pytest before any model loads, with a
message naming the option and what is accepted. An empty list (`--specbench-pairs=`, often an
unset shell variable) is such a bad value, not "the default".

Every output (CSV, JSON, results log, baseline, report, figures) is checked at start: its folder
is created if missing and a probe file is written and removed there, so a path under a regular
file or in a read-only folder fails before the first model loads; two options naming one file are
refused too (the log may be the file it resumes, and `--specbench-save-baseline` the baseline it
gates against). The options marked "changes results" change what a case measures: a resumed run
must use the values of the log it resumes.

What the options do, by purpose: [measuring and results files](measuring.md), [model pairs and
prompts](pairs.md), [engines, k schedules and the cost model](engines.md),
[sampling](sampling.md), [gating in CI](ci-gating.md), [many machines](many-machines.md).
"""


def _cell(text: str) -> str:
    """Text safe inside one Markdown table cell."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _value(value: str | None, option: Option) -> str:
    if option.flag:
        return "off (a flag)"
    if value is None:
        return "\u2014"
    return f"`{_cell(value)}`" if value else "empty"


def _row(option: Option) -> str:
    default = _value(option.default, option)
    cpu_default = _value(option.cpu_default, option) if option.cpu_default is not None else "same"
    value = f"={option.metavar}" if option.metavar else ""
    cells = [
        f"`{option.cli}{value}`",
        f"`{option.dest}`",
        default,
        cpu_default,
        "yes" if option.changes_results else "",
        _cell(option.help),
    ]
    return "| " + " | ".join(cells) + " |"


def options_markdown() -> str:
    """Every option of OPTIONS as a Markdown page: a short preamble, then one table row per option."""
    header = [
        "| option | ini key | default | CPU default | changes results | meaning |",
        "|---|---|---|---|---|---|",
    ]
    rows = [_row(option) for option in OPTIONS]
    return _PREAMBLE + "\n" + "\n".join(header + rows) + "\n"


if __name__ == "__main__":
    print(options_markdown(), end="")
