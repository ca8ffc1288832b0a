"""The linear layers' forms this machine settled under ``--specbench-kernels=auto``, kept in a file.

The forms round the last bits differently (``own``, ``rows``, the tiles, the head's columns), and greedy decoding
follows the bits where two tokens nearly tie. Chosen anew by timing in each process, a busy moment could flip a
form, and bfloat16 acceptance moved between two runs of one commit. So each (weight shape, dtype, head or not,
row count) is timed once per machine and kept: later runs, and workers running beside each other, read the file
and run the same forms. One file per kernel build, torch version, device and thread count; delete it (or point
``SPECBENCH_FORMS_DIR`` elsewhere) to settle afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

try:
    import fcntl
except ImportError:  # not on POSIX: each process settles alone; the file still keeps what the first wrote
    fcntl = None

__all__ = ["FORMS_DIR_VARIABLE", "forms_folder", "settled", "settled_path"]

#: the environment variable naming the folder of the files (default: the user's cache folder)
FORMS_DIR_VARIABLE = "SPECBENCH_FORMS_DIR"


def forms_folder() -> Path:
    """``$SPECBENCH_FORMS_DIR``, else ``pytest-specbench/kernel-forms`` in ``$XDG_CACHE_HOME`` or ``~/.cache``."""
    given = os.environ.get(FORMS_DIR_VARIABLE, "").strip()
    if given:
        return Path(given).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(cache) if cache else Path.home() / ".cache") / "pytest-specbench" / "kernel-forms"


def settled_path(device: torch.device) -> Path:
    """The file of ``device``'s forms under this kernel build, torch version and thread count."""
    from . import few_rows

    build = few_rows.recorded_state() if device.type == "cpu" else ""
    key = f"{build} | torch {torch.__version__} | {device.type} | {torch.get_num_threads()} threads"
    return forms_folder() / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def _read(path: Path) -> dict[str, str]:
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none yet, or damaged: settled again and written whole
        return {}
    return {key: value for key, value in kept.items() if isinstance(value, str)} if isinstance(kept, dict) else {}


def settled(path: Path, wanted: Mapping[str, Callable[[], str]], usable: Callable[[str, str], bool]) -> dict[str, str]:
    """The form of each key of ``wanted``: the file's where it holds one that is ``usable(key, form)``, else the
    one its function measures, written to the file. Under a lock on the file, so processes beside each other
    settle a shape once and agree. Where the folder cannot be written, the forms are measured and not kept."""
    from ..atomic import write_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return {key: measure() for key, measure in wanted.items()}
    try:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        kept = _read(path)
        chosen = {key: kept[key] for key in wanted if key in kept and usable(key, kept[key])}
        measured = {key: measure() for key, measure in wanted.items() if key not in chosen}
        if measured:
            try:
                write_atomic(path, json.dumps({**kept, **measured}, indent=0, sort_keys=True) + "\n")
            except OSError:
                pass  # kept in memory for this process only
        return {**chosen, **measured}
    finally:
        os.close(lock)
