"""What every option's parser shares: the usage error, a comma list, and a path the system could take."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


class ConfigError(ValueError):
    """A usage error in an option or ini value."""


def comma_list(accepted: str) -> Callable[[str], tuple[str, ...]]:
    """A parser of a non-empty comma list; ``accepted`` says what the list may hold."""

    def parse(raw: str) -> tuple[str, ...]:
        items = tuple(item.strip() for item in raw.split(",") if item.strip())
        # An empty value (often an unset shell variable) must not silently mean "the default".
        if not items:
            raise ValueError(f"no value given; accepted: {accepted}")
        duplicates = sorted({item for item in items if items.count(item) > 1})
        if duplicates:
            raise ValueError(f"listed more than once: {', '.join(duplicates)}")
        return items

    return parse


def path_problem(path: Path) -> str | None:
    """Why the system could take no file at ``path`` whatever the folder holds: longer than PATH_MAX, or a
    component longer than its file system's NAME_MAX (asked of the nearest folder that exists)."""
    encoded = os.fsencode(path)
    try:
        path_max = os.pathconf("/", "PC_PATH_MAX")
    except (OSError, ValueError):
        path_max = 4096
    if len(encoded) >= path_max:
        return (
            f"the path is {len(encoded)} bytes long, and this system takes at most {path_max - 1} "
            "(PATH_MAX); accepted: a shorter path"
        )
    existing = next((parent for parent in path.absolute().parents if is_dir(parent)), Path("/"))
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    for part in path.parts:
        if len(os.fsencode(part)) > name_max:
            return (
                f"the name {part[:40]!r}... is {len(os.fsencode(part))} bytes long, and the file system takes "
                f"at most {name_max} (NAME_MAX); accepted: a shorter name"
            )
    return None


def is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def checked_path(raw: str) -> Path:
    path = Path(raw).expanduser()
    problem = path_problem(path)
    if problem:
        raise ValueError(problem)
    return path
