"""A CPU model's weights moved into 2 MB pages (Linux transparent huge pages, asked for per mapping).

A decode step streams every weight once, and the few-rows kernel reads several weight rows at a time, each a
stream of its own. On 4 KB pages each stream needs a new address translation every 4 KB, which holds one-row
passes well under the read bandwidth (measured in docs/results/2026-12-05-one-row-bounds.md). Every pass of a
model reads the same weights, so the baseline and the speculative run gain alike.

Moving is a copy into an anonymous mapping with ``madvise(MADV_HUGEPAGE)``, one tensor at a time (the memory
held at once grows by the largest tensor only). Where the kernel gives no 2 MB pages (another system,
transparent huge pages ``never``), the weights stay where they are and :func:`pages_of` says why.

Every other tensor is then copied into memory of its own: a float32 checkpoint loads as views of its file's
mapping, and one small tensor left there (a norm's weight) would keep the whole file mapped and resident, as
much again as the weights. The file's pages under a tensor just copied are let go at once (``MADV_DONTNEED``;
the file still holds them), so the load never holds the weights twice (measured in
docs/results/2026-12-07-test-time-and-memory.md).
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["WeightPages", "huge_page_copy", "into_huge_pages", "pages_of", "proc_field_bytes"]

HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14
_MADV_DONTNEED = 4
_PAGE = mmap.PAGESIZE
_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")
_ATTRIBUTE = "_specbench_weight_pages"


@dataclass(frozen=True)
class WeightPages:
    """What :func:`into_huge_pages` did to one model: the bytes it moved, how many of them the kernel backs with
    2 MB pages (None where it cannot tell), or why it moved none."""

    moved_bytes: int = 0
    huge_bytes: int | None = None
    reason: str | None = None

    def __str__(self) -> str:
        if self.reason:
            return f"4 KB pages: {self.reason}"
        if self.huge_bytes is None:
            return f"2 MB pages asked for {self.moved_bytes / 1e9:.2f} GB (how many were given is not known)"
        return f"2 MB pages: {min(self.huge_bytes, self.moved_bytes) / 1e9:.2f} of {self.moved_bytes / 1e9:.2f} GB"


def _setting() -> str | None:
    try:
        text = _SETTING.read_text()
    except OSError:
        return None
    return text[text.index("[") + 1 : text.index("]")] if "[" in text else None


def proc_field_bytes(path: str, field: str) -> int | None:
    """A ``field: N kB`` line of a Linux ``/proc`` file, in bytes, or None where there is none."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _anon_huge_bytes() -> int | None:
    return proc_field_bytes("/proc/self/smaps_rollup", "AnonHugePages")


def _file_mappings() -> list[tuple[int, int]]:
    """The address ranges of this process's mappings of files (an inode, a path), from ``/proc/self/maps``."""
    ranges = []
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[4] != "0" and fields[5].startswith("/"):
            start, end = (int(part, 16) for part in fields[0].split("-"))
            ranges.append((start, end))
    return ranges


def _let_go_of_file_pages(tensor: torch.Tensor, files: list[tuple[int, int]]) -> None:
    """Drop from this process the whole pages of a file mapping under ``tensor`` (copied already): the file keeps
    their bytes, and memory the process does not hold any more is not counted as resident."""
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    if not any(low <= start and end <= high for low, high in files):
        return  # not a file's pages: anonymous memory would be lost
    first, last = -(-start // _PAGE) * _PAGE, end // _PAGE * _PAGE
    if last > first:
        ctypes.CDLL(None).madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), _MADV_DONTNEED)


def huge_page_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of contiguous ``tensor`` in an anonymous mapping aligned to 2 MB and advised into 2 MB pages."""
    nbytes = tensor.numel() * tensor.element_size()
    size = -(-nbytes // HUGE_PAGE) * HUGE_PAGE + HUGE_PAGE  # room to align the start to a 2 MB boundary
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    address = ctypes.addressof(ctypes.c_char.from_buffer(region))
    offset = -address % HUGE_PAGE
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.madvise(ctypes.c_void_p(address + offset), ctypes.c_size_t(size - offset), _MADV_HUGEPAGE) != 0:
        raise OSError(ctypes.get_errno(), "madvise(MADV_HUGEPAGE) refused")
    # The tensor holds the mapping (frombuffer keeps its buffer alive) and unmaps it when freed.
    moved = torch.frombuffer(region, dtype=torch.uint8, count=nbytes, offset=offset)
    moved = moved.view(tensor.dtype).view(tensor.shape)
    moved.copy_(tensor)
    return moved


def into_huge_pages(model: torch.nn.Module) -> WeightPages:
    """Move ``model``'s contiguous CPU parameters and buffers of 2 MB or more into 2 MB pages where the system
    gives them (see the module notes); what it did is kept with the model (:func:`pages_of`)."""
    moved: set[int] = set()
    files = _file_mappings()
    report = _move(model, moved, files)
    _copy_the_rest(model, moved, files)
    setattr(model, _ATTRIBUTE, report)
    return report


def _by_storage(model: torch.nn.Module) -> dict[int, list[torch.Tensor]]:
    """The model's CPU parameters and buffers by the storage they share (tied weights share one)."""
    groups: dict[int, list[torch.Tensor]] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.device.type == "cpu":
            groups.setdefault(tensor.untyped_storage().data_ptr(), []).append(tensor)
    return groups


def _copy_the_rest(model: torch.nn.Module, moved: set[int], files: list[tuple[int, int]]) -> None:
    """Copy each tensor not in ``moved`` (storage addresses) into memory of its own, sharing kept."""
    for address, tensors in _by_storage(model).items():
        first = tensors[0]
        if address in moved or not first.is_contiguous():
            continue
        if any(t.data_ptr() != first.data_ptr() or t.shape != first.shape for t in tensors):
            continue  # views of one storage in other shapes: left as they are
        source = first.data
        copy = source.clone()
        for tensor in tensors:
            tensor.data = copy
        _let_go_of_file_pages(source, files)


def _move(model: torch.nn.Module, moved: set[int], files: list[tuple[int, int]]) -> WeightPages:
    if not sys.platform.startswith("linux"):
        return WeightPages(reason=f"2 MB pages are asked for on Linux only, this is {sys.platform}")
    setting = _setting()
    if setting not in ("always", "madvise"):
        return WeightPages(reason=f"transparent huge pages are {setting or 'not offered'} on this system ({_SETTING})")
    # Tensors sharing storage (tied weights) move once and stay shared.
    before, moved_bytes = _anon_huge_bytes(), 0
    try:
        for tensors in _by_storage(model).values():
            first = tensors[0]
            if not first.is_contiguous() or first.numel() * first.element_size() < HUGE_PAGE:
                continue
            if any(t.data_ptr() != first.data_ptr() or t.shape != first.shape for t in tensors):
                continue  # views of one storage in other shapes: left as they are
            source = first.data
            copy = huge_page_copy(source)
            for tensor in tensors:
                tensor.data = copy
            _let_go_of_file_pages(source, files)
            moved.add(copy.untyped_storage().data_ptr())
            moved_bytes += first.numel() * first.element_size()
    except OSError as error:
        return WeightPages(moved_bytes=moved_bytes, reason=f"the system refused 2 MB pages ({error})")
    after = _anon_huge_bytes()
    huge = after - before if before is not None and after is not None else None
    return WeightPages(moved_bytes=moved_bytes, huge_bytes=max(huge, 0) if huge is not None else None)


def pages_of(model: torch.nn.Module) -> str:
    """What :func:`into_huge_pages` did to ``model`` (``"2 MB pages: 1.05 of 1.07 GB"``, or why 4 KB pages), or
    ``""`` where it was never asked (a model not loaded on a CPU by :func:`~.loading.load_model`)."""
    report = getattr(model, _ATTRIBUTE, None)
    return str(report) if report is not None else ""
