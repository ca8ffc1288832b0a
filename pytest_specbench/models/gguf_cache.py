"""Load GGUF checkpoints through a cache of their dequantised conversions (dequantising on every load is slow).

Layout under :func:`default_cache_dir`::

    gguf-converted/<sha256>-tf<transformers version>/   one converted model (``save_pretrained``)
    hashes/<key>.json  memoised file hashes;  verified/<entry>@<host>.json  last full hash here;  locks/

An entry is built in a temporary directory, fsynced and renamed into place only when complete, and its marker
records every file's size and sha256. Each load checks the sizes; the hashes, which cost almost as much as a load,
once per machine and day (and whenever a size or mtime changed). Damage discards the entry and converts again;
other errors are raised as they are. Modes follow the umask, so a group can share the cache. Why and how to share
it: docs/pairs.md, "The embedded model".
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from ..atomic import write_atomic

__all__ = [
    "ENTRY_MARKER",
    "CorruptEntry",
    "cached_entry",
    "convert_gguf",
    "default_cache_dir",
    "ensure_converted",
    "entry_dir",
    "file_lock",
    "file_sha256",
    "load_gguf",
    "memoised_sha256",
    "remember_sha256",
    "resolve_cache_dir",
    "verify_entry",
]

logger = logging.getLogger(__name__)

#: written last into a finished entry; an entry without it is never used
ENTRY_MARKER = "specbench-entry.json"
_HASH_CHUNK = 4 * 1024 * 1024


def default_cache_dir() -> Path:
    """``$SPECBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/pytest-specbench``, else ``~/.cache/pytest-specbench``."""
    explicit = os.environ.get("SPECBENCH_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "pytest-specbench"


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None) -> Path:
    """``cache_dir`` as a path, or the default one when it is None."""
    return Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()


# --- content hashes ---------------------------------------------------------


def _memo_path(path: Path, cache_dir: Path) -> Path:
    # One small file per GGUF path, so parallel workers never rewrite a shared index.
    key = hashlib.sha1(str(path).encode("utf-8")).hexdigest()
    return cache_dir / "hashes" / f"{key}.json"


def _stat_key(path: Path) -> dict:
    stat = path.stat()
    return {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def memoised_sha256(path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None) -> str | None:
    """The remembered sha256 of ``path`` if its size and mtime are unchanged; never hashes."""
    path = Path(path).resolve()
    memo = _memo_path(path, resolve_cache_dir(cache_dir))
    try:
        record = json.loads(memo.read_text())
        if {k: record.get(k) for k in ("path", "size", "mtime_ns")} == _stat_key(path):
            return str(record["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def remember_sha256(
    path: str | os.PathLike[str], sha256: str, *, cache_dir: str | os.PathLike[str] | None = None
) -> None:
    """Record ``sha256`` for ``path`` at its current size and mtime (best effort)."""
    path = Path(path).resolve()
    memo = _memo_path(path, resolve_cache_dir(cache_dir))
    try:
        write_atomic(memo, json.dumps({**_stat_key(path), "sha256": sha256}))
    except OSError as error:  # a read-only cache only costs a rehash next time
        logger.debug("could not memoise the hash of %s: %s", path, error)


def _sha256_of(path: Path) -> str:
    """sha256 of a file's content, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_HASH_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None) -> str:
    """sha256 of a file's content, hashed in chunks and memoised by (path, size, mtime)."""
    known = memoised_sha256(path, cache_dir=cache_dir)
    if known is not None:
        return known
    sha256 = _sha256_of(Path(path))
    remember_sha256(path, sha256, cache_dir=cache_dir)
    return sha256


# --- entries ----------------------------------------------------------------


def entry_dir(sha256: str, *, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the conversion of the GGUF with content hash ``sha256`` lives.

    The transformers version is part of the name: its GGUF dequantisation and
    tokenizer rebuilding change between releases, and an entry written by one
    release must not silently stand in for another's conversion.
    """
    return resolve_cache_dir(cache_dir) / "gguf-converted" / f"{sha256}-tf{transformers.__version__}"


def cached_entry(sha256: str, *, cache_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The finished entry for ``sha256``, or None if there is none (not checked: see :func:`verify_entry`)."""
    entry = entry_dir(sha256, cache_dir=cache_dir)
    return entry if (entry / ENTRY_MARKER).is_file() else None


class CorruptEntry(Exception):
    """A cache entry whose files are not what its marker recorded; the message says which file and how."""


def _today() -> str:
    return datetime.date.today().isoformat()


def _entry_files(folder: Path) -> list[Path]:
    """The entry's files, marker excluded, in a fixed order."""
    return sorted(path for path in folder.rglob("*") if path.is_file() and path.name != ENTRY_MARKER)


def _file_states(entry: Path, names: list[str]) -> dict[str, list[int]]:
    # (size, mtime_ns): what a stamp of verified hashes depends on.
    return {name: [(entry / name).stat().st_size, (entry / name).stat().st_mtime_ns] for name in names}


def _stamp_path(entry: Path, cache_dir: Path) -> Path:
    return cache_dir / "verified" / f"{entry.name}@{socket.gethostname()}.json"


def _stamp(entry: Path, cache_dir: Path, names: list[str]) -> None:
    """Record that this machine hashed ``entry`` today (best effort: without it, the next load hashes again)."""
    try:
        write_atomic(_stamp_path(entry, cache_dir), json.dumps({"date": _today(), "files": _file_states(entry, names)}))
    except OSError as error:
        logger.debug("could not stamp %s as verified: %s", entry, error)


def _hashed_today(entry: Path, cache_dir: Path, names: list[str]) -> bool:
    try:
        stamp = json.loads(_stamp_path(entry, cache_dir).read_text())
        return stamp["date"] == _today() and stamp["files"] == _file_states(entry, names)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def verify_entry(entry: Path, *, cache_dir: str | os.PathLike[str] | None = None, full: bool = False) -> None:
    """Raise :class:`CorruptEntry` unless ``entry``'s files match the sizes and hashes its marker recorded.

    Sizes are checked every time; hashes when ``full``, or when this machine has not hashed the
    entry today, or a file's size or mtime changed since it did.
    """
    cache = resolve_cache_dir(cache_dir)
    try:
        files = json.loads((entry / ENTRY_MARKER).read_text(encoding="utf-8"))["files"]
        names = sorted(files)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CorruptEntry(f"its marker {ENTRY_MARKER} has no readable file list ({error})") from None
    for name in names:
        path = entry / name
        if not path.is_file():
            raise CorruptEntry(f"{name} is missing")
        if path.stat().st_size != files[name]["size"]:
            raise CorruptEntry(f"{name} has {path.stat().st_size} bytes, the marker recorded {files[name]['size']}")
    if not full and _hashed_today(entry, cache, names):
        return
    for name in names:
        if _sha256_of(entry / name) != files[name]["sha256"]:
            raise CorruptEntry(f"{name} does not have the sha256 the marker recorded (same size, other content)")
    _stamp(entry, cache, names)


@contextlib.contextmanager
def file_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (POSIX); elsewhere a no-op.

    Parallel test workers would otherwise all spend a minute converting the
    same file; with the lock, one converts and the others reuse its entry.
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # Windows: the atomic rename alone keeps entries consistent
        yield
        return
    # Read-only: flock needs no write access, so a lock file another user of the group created still works.
    descriptor = os.open(lock_path, os.O_RDONLY | os.O_CREAT, 0o666)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(descriptor, fcntl.LOCK_UN)
    finally:
        os.close(descriptor)


def _remove_entry(entry: Path) -> None:
    """Take a bad entry out of use at once (rename), then delete it."""
    trash = entry.with_name(f".trash-{entry.name}-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.replace(entry, trash)
    except OSError:
        trash = entry
    shutil.rmtree(trash, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _seal(folder: Path) -> dict[str, dict]:
    """Give ``folder`` and its files the umask's modes, fsync them, and return their sizes and hashes.

    mkdtemp makes the folder 0700 and safetensors writes 0600, which would lock every other
    user of a shared cache out; fsync before the rename, so a power cut cannot leave a named
    entry with empty files.
    """
    mask = _umask()
    files = {}
    for path in _entry_files(folder):
        os.chmod(path, 0o666 & ~mask)
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
        files[path.relative_to(folder).as_posix()] = {"size": path.stat().st_size, "sha256": _sha256_of(path)}
    for sub in [folder, *(path for path in folder.rglob("*") if path.is_dir())]:
        os.chmod(sub, 0o777 & ~mask)
    return files


def _fsync_folder(folder: Path) -> None:
    """Make a folder's entries (a new file, a rename) durable; a no-op where folders cannot be opened."""
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _strip_gguf_quantizer(model: PreTrainedModel) -> None:
    # Transformers marks a model read from GGUF as quantized even when every
    # weight was dequantised, and then refuses to save it; the dense weights are
    # plain tensors, so dropping the marker is all that is needed.
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    elif hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def convert_gguf(gguf_path: str | os.PathLike[str], dest: str | os.PathLike[str]) -> None:
    """Dequantise ``gguf_path`` with transformers and save model + tokenizer to ``dest``.

    Needs the ``gguf`` package. Weights are kept in float32 (the dequantised
    values are not exactly representable in 16 bits); :func:`load_gguf` casts
    on load.
    """
    gguf_path = Path(gguf_path)
    kwargs: dict = {"gguf_file": gguf_path.name}
    try:  # ask for dense weights explicitly where transformers could keep GGUF blocks packed
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:
        pass
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), dtype=torch.float32, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    _strip_gguf_quantizer(model)
    model.save_pretrained(str(dest))
    tokenizer.save_pretrained(str(dest))


def _convert_sealed(path: Path, folder: Path, sha256: str) -> dict[str, Any]:
    """Convert ``path`` into ``folder`` and write its marker (hashes of every file), all flushed to disk."""
    started = time.perf_counter()
    convert_gguf(path, folder)
    marker = {
        "gguf_file": str(path),
        "sha256": sha256,
        "transformers": transformers.__version__,
        "conversion_s": round(time.perf_counter() - started, 3),
        "files": _seal(folder),
    }
    with open(folder / ENTRY_MARKER, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(marker, indent=2))
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(folder / ENTRY_MARKER, 0o666 & ~_umask())
    _fsync_folder(folder)
    return marker


def ensure_converted(
    gguf_path: str | os.PathLike[str] | Callable[[], Path],
    *,
    sha256: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    rebuild: bool = False,
) -> tuple[Path, bool]:
    """The cache entry for a GGUF file, converting it first if needed.

    ``gguf_path`` may be a callable producing the path, so a caller that knows
    the hash in advance (the embedded model) only materialises the file when
    there is no entry yet. ``rebuild`` replaces an entry found corrupt, unless
    its files hash as recorded by the time the lock is held (another process
    rebuilt it meanwhile). Returns ``(entry, converted_now)``.
    """
    cache = resolve_cache_dir(cache_dir)
    if sha256 is None:
        if callable(gguf_path):
            gguf_path = gguf_path()
        sha256 = file_sha256(gguf_path, cache_dir=cache)
    if not rebuild and (entry := cached_entry(sha256, cache_dir=cache)) is not None:
        return entry, False

    with file_lock(cache / "locks" / f"{sha256}.lock"):
        entry = entry_dir(sha256, cache_dir=cache)
        if cached_entry(sha256, cache_dir=cache) is not None and not (rebuild and _entry_problem(entry, cache)):
            return entry, False  # another process converted (or rebuilt) it while we waited
        if entry.exists():  # corrupt (rebuild), or its marker is gone: never trusted
            _remove_entry(entry)
        # Temp dirs of conversions that crashed; with the lock held, none is in progress.
        for stale in entry.parent.glob(f".tmp-{sha256[:16]}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        path = Path(gguf_path() if callable(gguf_path) else gguf_path)
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=entry.parent, prefix=f".tmp-{sha256[:16]}-"))
        try:
            marker = _convert_sealed(path, tmp, sha256)
            try:
                os.replace(tmp, entry)
            except OSError:
                # Lost a race with a process that holds no lock (Windows): use theirs.
                if cached_entry(sha256, cache_dir=cache) is None:
                    raise
            else:
                _fsync_folder(entry.parent)
                _stamp(entry, cache, sorted(marker["files"]))  # just hashed: no need to hash again today
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return entry, True


def _entry_problem(entry: Path, cache_dir: Path) -> str | None:
    """What is wrong with ``entry``, hashes included, or None when it is sound."""
    try:
        verify_entry(entry, cache_dir=cache_dir, full=True)
    except CorruptEntry as error:
        return str(error)
    return None


#: errors of loading an entry that mean its files are damaged; transformers reports unreadable JSON as
#: OSError. PermissionError is an OSError too but is re-raised: it is no damage.
_CORRUPTION_ERRORS = (CorruptEntry, SafetensorError, OSError, json.JSONDecodeError, UnicodeDecodeError)


def _load_entry(entry: Path, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    model = AutoModelForCausalLM.from_pretrained(str(entry), dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(str(entry))
    return model, tokenizer


def load_gguf(
    gguf_path: str | os.PathLike[str] | Callable[[], Path],
    *,
    dtype: torch.dtype = torch.float32,
    cache_dir: str | os.PathLike[str] | None = None,
    sha256: str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
    """Load a GGUF model through the conversion cache.

    Returns ``(model, tokenizer, source)`` where ``source`` is
    ``"gguf-converted"`` when the file was converted by this call and
    ``"gguf-cache"`` when an existing entry was reused. An entry whose files
    differ from its marker (truncated by a full disk, deleted, overwritten), or
    that fails to load with an error meaning damaged files, is discarded and
    converted again, once; other errors (out of memory) leave the entry alone.
    """
    entry, converted = ensure_converted(gguf_path, sha256=sha256, cache_dir=cache_dir)
    if not converted:
        try:
            verify_entry(entry, cache_dir=cache_dir)
            return (*_load_entry(entry, dtype), "gguf-cache")
        except _CORRUPTION_ERRORS as error:
            if isinstance(error, PermissionError):
                raise  # another user's entry this one may not read: converting again would not help
            logger.warning("discarding corrupt GGUF cache entry %s (%s); converting again", entry, error)
        entry, converted = ensure_converted(gguf_path, sha256=sha256, cache_dir=cache_dir, rebuild=True)
    model, tokenizer = _load_entry(entry, dtype)
    return model, tokenizer, "gguf-converted" if converted else "gguf-cache"
