"""The verify-cost curve as rows: per (dtype, form, m), v(m) and its ratios, typed; their text table; the
engine's settled forms in words. Pure Python: the rounds' samples come from :mod:`.measure`."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tabulate import tabulate

#: form name -> the kernel setting (engine/names.py KERNELS, --specbench-kernels) it runs under
FORMS: dict[str, str] = {"own": "linear", "engine": "auto", "rows": "rows", "column": "column"}
DEFAULT_POSITIONS = (1, 2, 3, 5, 9, 17)

#: every round's curve v(1) .. v(max m), seconds, per (dtype, form)
Samples = Mapping[tuple[str, str], Sequence[Sequence[float]]]


@dataclass(frozen=True)
class CurvePoint:
    """One (dtype, form, m) of the curve, as the table prints it and the JSON keeps it."""

    dtype: str
    form: str
    m: int
    v_s: float  # median over rounds of v(m), seconds
    ratio_to_v1: float  # median over rounds of each round's own v(m)/v(1)
    ratio_to_v1_low: float  # the lowest round's ratio
    ratio_to_v1_high: float  # the highest round's ratio
    ratio_to_float32: float | None  # median v(m) over float32's median v(m) in the same form (None: no float32)
    gbps: float | None = None  # the target's weight bytes over v(m)
    read_share: float | None = None  # gbps over the memory read bandwidth

    def to_json(self) -> dict[str, Any]:
        """The point as the JSON's ``curves`` entries hold it."""
        return dataclasses.asdict(self)


def curve_rows(
    samples: Samples,
    positions: Sequence[int],
    nbytes: Mapping[str, int] | None = None,
    read_gbps: float | None = None,
) -> list[CurvePoint]:
    """One point per (dtype, form, m): median v(m); v(m)/v(1) as the median, lowest and highest of the rounds'
    own ratios; median v(m) over float32's median v(m) in the same form; and with the dtypes' weight bytes
    ``nbytes``, the pass's effective bandwidth (GB/s) and its share of ``read_gbps``."""
    medians = {
        contender: {m: statistics.median(curve[m - 1] for curve in curves) for m in positions}
        for contender, curves in samples.items()
    }
    points = []
    for (dtype, form), curves in samples.items():
        float32 = medians.get(("float32", form))
        for m in positions:
            ratios = [curve[m - 1] / curve[0] for curve in curves]
            seconds = medians[dtype, form][m]
            gbps = _gbps(nbytes.get(dtype) if nbytes else None, seconds)
            points.append(
                CurvePoint(
                    dtype=dtype,
                    form=form,
                    m=m,
                    v_s=seconds,
                    ratio_to_v1=statistics.median(ratios),
                    ratio_to_v1_low=min(ratios),
                    ratio_to_v1_high=max(ratios),
                    ratio_to_float32=seconds / float32[m] if float32 else None,
                    gbps=gbps,
                    read_share=gbps / read_gbps if gbps and read_gbps else None,
                )
            )
    return points


def _gbps(nbytes: int | None, seconds: float) -> float | None:
    return nbytes / seconds / 1e9 if nbytes and seconds > 0 else None


class SettledForms(Protocol):
    """What :func:`engine_forms` reads of a target's ``kernels.verify_forms.KernelForms``."""

    def choices(self, max_rows: int) -> Mapping[tuple[tuple[int, ...], str, bool], Mapping[int, str]]: ...


def engine_forms(kernels: Mapping[str, SettledForms], max_rows: int) -> dict[str, dict[str, str]]:
    """Per dtype, the engine's settled form of each layer group (``kernels``: each dtype's ``auto`` forms), in
    words a reader compares across runs: ``{"head 151936x1536": "2-9 rows, 10-17 own"}``."""
    described: dict[str, dict[str, str]] = {}
    for dtype, forms in kernels.items():
        layers = {}
        for (shape, _, is_head), by_rows in forms.choices(max_rows).items():
            name = f"{'head' if is_head else 'linear'} {'x'.join(map(str, shape))}"
            runs: list[list] = []
            for rows, form in by_rows.items():
                if runs and runs[-1][2] == form:
                    runs[-1][1] = rows
                else:
                    runs.append([rows, rows, form])
            layers[name] = ", ".join(
                f"{low}-{high} {form}" if low < high else f"{low} {form}" for low, high, form in runs
            )
        described[dtype] = layers
    return described


def table(points: Sequence[CurvePoint]) -> str:
    """The points as a text table (milliseconds), one line each."""
    headers = ["dtype", "form", "m", "v(m) ms", "v(m)/v(1)", "rounds' range", "v(m)/v_float32(m)", "GB/s", "of read"]
    body = [
        [
            point.dtype,
            point.form,
            point.m,
            f"{1000 * point.v_s:.3f}",
            f"{point.ratio_to_v1:.2f}",
            f"{point.ratio_to_v1_low:.2f} to {point.ratio_to_v1_high:.2f}",
            "" if point.ratio_to_float32 is None else f"{point.ratio_to_float32:.2f}",
            "" if point.gbps is None else f"{point.gbps:.1f}",
            "" if point.read_share is None else f"{point.read_share:.0%}",
        ]
        for point in points
    ]
    return tabulate(body, headers=headers, disable_numparse=True)
