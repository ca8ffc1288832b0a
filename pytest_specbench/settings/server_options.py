"""Parsers of a served engine's options: the program that starts its servers, more arguments for them, and
servers someone else runs (one URL per configuration). Each engine's declaration says what it accepts."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .parsing import ConfigError, checked_path, comma_list


def executable(accepted: str) -> Callable[[str], Path]:
    """A parser of an executable file's path; ``accepted`` says which program (e.g. vLLM's interpreter)."""

    def parse(raw: str) -> Path:
        path = checked_path(raw)
        if not path.is_file() or not os.access(path, os.X_OK):
            raise ValueError(f"{path} is not an executable file; accepted: {accepted}")
        return path

    return parse


def find_program(given: Path | None, variable: str, built: Path, needs: str, makes: str) -> Path:
    """A served engine's program: the option's ``given`` path, else ``$variable``, else the ``built`` default; a
    usage error naming all three where none is an executable (before any model loads). ``needs`` says what the
    engine needs (``vLLM's own environment``), ``makes`` what makes the default (a script)."""
    if given is not None:
        return given
    from_env = os.environ.get(variable, "").strip()
    candidate = Path(from_env).expanduser() if from_env else built
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate.absolute()
    where = f"${variable} ({from_env})" if from_env else f"{built} (none here)"
    raise ConfigError(f"{needs}, and {where} is no executable; accepted: the option's PATH, ${variable}, or {makes}")


def shell_words(raw: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(raw))
    except ValueError as error:
        raise ValueError(
            f"{raw!r} cannot be split as shell words ({error}); accepted: e.g. '--tensor-parallel-size 8'"
        ) from None


ENDPOINTS_ACCEPTED = (
    "a comma list of NAME=URL, NAME baseline or k<K> (e.g. baseline=http://node:8000,k4=http://node:8001)"
)


def endpoints(raw: str) -> tuple[tuple[str, str], ...]:
    """``baseline=URL,k4=URL``: the servers someone else runs, one per configuration, baseline required."""
    pairs = []
    for item in comma_list(ENDPOINTS_ACCEPTED)(raw):
        name, equals, url = (part.strip() for part in item.partition("="))
        if not equals or not (name == "baseline" or re.fullmatch(r"k[1-9][0-9]*", name)):
            raise ValueError(f"{item!r} is no NAME=URL; accepted: {ENDPOINTS_ACCEPTED}")
        parts = urllib.parse.urlsplit(url)
        try:
            port_ok = parts.port != 0  # reading a port past 65535 raises
        except ValueError:
            port_ok = False
        if not port_ok or parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ValueError(
                f"{url!r} ({name}) is no server URL; accepted: http(s)://HOST[:PORT][/PATH], PORT in 1 to 65535"
            )
        pairs.append((name, url.rstrip("/")))
    names = [name for name, _ in pairs]
    if len(set(names)) < len(names):
        raise ValueError(f"a name is given twice in {raw!r}; accepted: one URL per name")
    if "baseline" not in names or len(names) < 2:
        raise ValueError(f"{raw!r} needs a baseline and at least one k<K>; accepted: {ENDPOINTS_ACCEPTED}")
    return tuple(pairs)


@dataclass(frozen=True)
class ServedOptions:
    """A served engine's three options: the program that starts its servers, more arguments for them, and servers
    someone else runs (by option name, ``vllm-python``; each option's field is its name with underscores)."""

    engine: str
    program: str
    arguments: str
    endpoints: str

    def field(self, option: str) -> str:
        return option.replace("-", "_")


def check_served_settings(
    options: ServedOptions,
    values: dict[str, Any],
    given: frozenset[str],
    runs: bool,
    find_program: Callable[[Path | None], Path],
) -> dict[str, Any]:
    """A served engine's settings resolved: its program found (``find_program`` of the value given, a usage error
    where there is none) where this run starts servers; a usage error where the options contradict each other."""
    values = dict(values)
    endpoints_given = values[options.field(options.endpoints)]
    if endpoints_given and not runs:
        raise ConfigError(
            f"--specbench-{options.endpoints} names servers for the {options.engine} engine, which this run does not "
            f"run; accepted: --specbench-engine={options.engine} (or a list with {options.engine}) beside it"
        )
    started_only = [f"--specbench-{name}" for name in (options.program, options.arguments) if name in given]
    if endpoints_given and started_only:
        raise ConfigError(
            f"{' and '.join(started_only)} set up servers this run starts, and --specbench-{options.endpoints} "
            "names servers someone else runs, so this run starts none; accepted: one of the two"
        )
    if runs:
        if not endpoints_given:  # endpoints need no program: this run starts no server
            values[options.field(options.program)] = find_program(values[options.field(options.program)])
        if importlib.util.find_spec("prometheus_client") is None:
            raise ConfigError(
                f"--specbench-engine={options.engine} reads the server's counters with prometheus-client, which is "
                "not installed; accepted: pip install 'pytest-specbench[served]'"
            )
    return values
