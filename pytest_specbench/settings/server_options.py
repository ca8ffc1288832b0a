"""Parsers of a served engine's options: the program that starts its servers, more arguments for them, and
servers someone else runs (one URL per configuration). Each engine's declaration says what it accepts."""

from __future__ import annotations

import os
import re
import shlex
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from .parsing import checked_path, comma_list


def executable(accepted: str) -> Callable[[str], Path]:
    """A parser of an executable file's path; ``accepted`` says which program (e.g. vLLM's interpreter)."""

    def parse(raw: str) -> Path:
        path = checked_path(raw)
        if not path.is_file() or not os.access(path, os.X_OK):
            raise ValueError(f"{path} is not an executable file; accepted: {accepted}")
        return path

    return parse


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
