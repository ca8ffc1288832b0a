"""Load GGUF checkpoints through a cache of their dequantised conversions.

Transformers reads a GGUF file by dequantising every tensor and rebuilding
the tokenizer from the file's metadata, which takes about a minute for
Gemma 3 270M on a laptop CPU. The result is saved once with
``save_pretrained`` (safetensors) under a directory named after the file's
sha256, and later runs load that directory like any local checkpoint.

Layout of the cache directory (see :func:`default_cache_dir`)::

    gguf-converted/<sha256>-tf<transformers version>/   one converted model
    hashes/<key>.json                                    memoised file hashes
    locks/                                               conversion locks

An entry is built in a temporary directory and renamed into place only when
complete, so a crash never leaves a half-written entry under its final name.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from ..atomic import write_atomic

__all__ = [
    "ENTRY_MARKER",
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


def file_sha256(path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None) -> str:
    """sha256 of a file's content, hashed in chunks and memoised by (path, size, mtime)."""
    known = memoised_sha256(path, cache_dir=cache_dir)
    if known is not None:
        return known
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_HASH_CHUNK):
            digest.update(block)
    sha256 = digest.hexdigest()
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
    """The finished entry for ``sha256``, or None if there is none."""
    entry = entry_dir(sha256, cache_dir=cache_dir)
    return entry if (entry / ENTRY_MARKER).is_file() else None


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
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_entry(entry: Path) -> None:
    """Take a bad entry out of use at once (rename), then delete it."""
    trash = entry.with_name(f".trash-{entry.name}-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.replace(entry, trash)
    except OSError:
        trash = entry
    shutil.rmtree(trash, ignore_errors=True)


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
    there is no entry yet. Returns ``(entry, converted_now)``.
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
        if not rebuild and cached_entry(sha256, cache_dir=cache) is not None:
            return entry, False  # another process converted it while we waited
        if entry.exists():  # unreadable (rebuild), or its marker is gone: never trusted
            _remove_entry(entry)
        # Temp dirs of conversions that crashed; with the lock held, none is in progress.
        for stale in entry.parent.glob(f".tmp-{sha256[:16]}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        path = Path(gguf_path() if callable(gguf_path) else gguf_path)
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=entry.parent, prefix=f".tmp-{sha256[:16]}-"))
        try:
            started = time.perf_counter()
            convert_gguf(path, tmp)
            marker = {
                "gguf_file": str(path),
                "sha256": sha256,
                "transformers": transformers.__version__,
                "conversion_s": round(time.perf_counter() - started, 3),
            }
            (tmp / ENTRY_MARKER).write_text(json.dumps(marker, indent=2))
            try:
                os.replace(tmp, entry)
            except OSError:
                # Lost a race with a process that holds no lock (Windows): use theirs.
                if cached_entry(sha256, cache_dir=cache) is None:
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return entry, True


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
    ``"gguf-cache"`` when an existing entry was reused. An entry that fails to
    load (truncated by a full disk, deleted files) is discarded and rebuilt once.
    """
    entry, converted = ensure_converted(gguf_path, sha256=sha256, cache_dir=cache_dir)
    try:
        model, tokenizer = _load_entry(entry, dtype)
    except Exception as error:
        if converted:
            raise
        logger.warning("discarding unreadable GGUF cache entry %s (%s); converting again", entry, error)
        entry, converted = ensure_converted(gguf_path, sha256=sha256, cache_dir=cache_dir, rebuild=True)
        model, tokenizer = _load_entry(entry, dtype)
    return model, tokenizer, "gguf-converted" if converted else "gguf-cache"
