"""The summary's kernel and memory lines of a pair: each pass's effective bandwidth beside the machine's
read bandwidth, what the engine's kernels gain over transformers' own, and a kernel that could not be built."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median

from ..kernels.names import WITHOUT_TILES, few_rows_built
from ..results.schema import CaseResult
from ..settings.engines import runs_own_loop
from .dtype_view import dtype_order


def _share(gbps: float, read: float | None) -> str:
    return f"{gbps:.1f} GB/s" + (f" ({gbps / read:.0%})" if read else "")


def _dtype_line(dtype: str, rows: Sequence[CaseResult]) -> str | None:
    reads = [row.memory_read_gbps for row in rows if row.memory_read_gbps]
    steps = [row.one_row_gbps for row in rows if row.one_row_gbps]
    if not steps:
        return None
    read = median(reads) if reads else None
    parts = [f"memory read {read:.1f} GB/s" if read else "memory read not measured"]
    parts.append(f"one-row step {_share(median(steps), read)}")
    drafts: dict[str, list[float]] = {}
    for row in rows:
        if row.draft_one_row_gbps:
            drafts.setdefault(row.pair, []).append(row.draft_one_row_gbps)
    for pair, figures in drafts.items():  # each pair's draft apart: a copy of the target and a model differ
        parts.append(f"{pair}'s draft model's one-row step {_share(median(figures), read)}")
    by_k: dict[int, list[float]] = {}
    for row in rows:
        if isinstance(row.k, int) and row.verify_pass_gbps:
            by_k.setdefault(row.k, []).append(row.verify_pass_gbps)
    if by_k:
        low, high = min(by_k), max(by_k)
        verify = f"verify pass {_share(median(by_k[low]), read)} at k={low}"
        parts.append(verify + (f" to {_share(median(by_k[high]), read)} at k={high}" if high != low else ""))
    gains = [row.kernel_step_gain for row in rows if row.kernel_step_gain]
    if gains:
        parts.append(
            f"transformers' own one-row step {median(gains):.2f}x the engine's (kernels on both sides of each "
            "speedup, so in none)"
        )
    return f"  {dtype}: " + "; ".join(parts)


def bandwidth_lines(rows: Sequence[CaseResult]) -> list[str]:
    """Per dtype of the native engine's rows: the bandwidth of the target's passes (weight bytes over v(1) and
    v(k + 1)) and of each pair's draft model's one-row step, as shares of the memory read bandwidth; a line naming
    why the few-rows kernel did not run, one per draft model whose layers the engine's forms cannot serve (a dynamic
    int8 copy's), one why its AMX tiles did not on a CPU that has them, and one naming why the weights are in 4 KB
    pages."""
    native = [row for row in rows if runs_own_loop(row.engine)]
    lines = []
    for dtype in dtype_order([row.dtype for row in native]):
        line = _dtype_line(dtype, [row for row in native if row.dtype == dtype])
        if line:
            lines.append(line)
    if lines:
        lines.insert(0, "target passes against memory (weight bytes over the probe's pass time, medians of the cases):")
    recorded = {row.few_rows_kernel for row in native}
    missing = sorted(reason for reason in recorded if reason and not few_rows_built(reason))
    lines += [f"few-rows kernel not used: {reason}; torch's own kernels ran" for reason in missing]
    # a draft none of whose layers the engine's forms serve (not one kept on its own kernels by the setting)
    own_drafts = sorted({row.draft_kernel_forms for row in native if row.draft_kernel_forms.startswith("own: no ")})
    lines += [f"draft model's layers: {forms.removeprefix('own: ')}" for forms in own_drafts]
    without_tiles = sorted({state.partition(", ")[2] for state in recorded if f", {WITHOUT_TILES}: " in state})
    lines += [f"few-rows kernel ran {reason}; its dot products ran in their place" for reason in without_tiles]
    small_pages = sorted({row.weight_pages for row in native if row.weight_pages.startswith("4 KB")})
    lines += [f"target weights in {reason}" for reason in small_pages]
    return lines
