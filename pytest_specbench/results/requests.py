"""Per-request statistics, as serving teams read them: each request's acceptance, tau and time per output token,
and their percentiles across requests.

A *request* is one decode of one input: a timed speculative run of a single sequence, each turn of a multi-turn
run (``run.turns``), each row of a batched run. A token-weighted mean leans towards the requests that drafted most
(vLLM's per-request acceptance histogram answers the same bias), and a mean time per token hides the slow tail a
serving team reads at p95 and p99, so each request counts once here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..engine.stats import DecodeStats, GenerationResult

#: numpy.percentile's method: linear interpolation between the closest ranks (Hyndman and Fan's type 7, numpy's
#: default); with few requests a high percentile lies between the slowest two
PERCENTILE_METHOD = "linear"
#: percentiles of the time per output token (the tail a serving team reads) and of acceptance and tau (the spread)
TPOT_PERCENTILES = (50, 95, 99)
SPREAD_PERCENTILES = (10, 50, 90)


def percentiles(values: Iterable[float | None], qs: Sequence[float]) -> list[float | None]:
    """The ``qs`` percentiles of ``values`` (None values left out) by :data:`PERCENTILE_METHOD`; None for each
    where no value is known."""
    known = [float(value) for value in values if value is not None]
    if not known:
        return [None] * len(qs)
    import numpy as np

    return [float(value) for value in np.percentile(known, list(qs), method=PERCENTILE_METHOD)]


def mean(values: Iterable[float | None]) -> float | None:
    """The mean of the known values (None where none is known)."""
    known = [value for value in values if value is not None]
    return sum(known) / len(known) if known else None


def request_stats(runs: Sequence[GenerationResult], batched: bool = False) -> list[DecodeStats]:
    """The stats of every request of ``runs`` (timed speculative runs): a run's turns, or the run itself; at
    ``batched``, each row of each run (a batched run iterates its rows)."""
    parts = [row for run in runs for row in run] if batched else list(runs)
    return [request.stats for part in parts for request in (part.turns or [part])]


def request_acceptance(stats: DecodeStats) -> float | None:
    """A request's accepted / drafted tokens; None where it drafted nothing (no acceptance to read)."""
    return stats.accepted_tokens / stats.drafted_tokens if stats.drafted_tokens else None


def request_fields(requests: Sequence[DecodeStats]) -> dict[str, Any]:
    """A case row's per-request fields: each request's acceptance, tau and time per output token (decode time per
    token after the first, prefill excluded, milliseconds; None without a decode phase), their percentiles and the
    per-request mean acceptance."""
    acceptance = [request_acceptance(stats) for stats in requests]
    # A request with no decode phase (one token) has no tau and no time per output token.
    tau = [stats.tokens_per_step if stats.decode_steps else None for stats in requests]
    tpot_ms = [1000 * stats.time_per_decode_token_s if stats.decode_tokens else None for stats in requests]
    fields: dict[str, Any] = dict(
        requests=len(requests),
        request_acceptance=acceptance,
        request_tau=tau,
        request_tpot_ms=tpot_ms,
        request_mean_acceptance=mean(acceptance),
    )
    fields.update(zip((f"tpot_p{q}_ms" for q in TPOT_PERCENTILES), percentiles(tpot_ms, TPOT_PERCENTILES)))
    fields.update(zip((f"acceptance_p{q}" for q in SPREAD_PERCENTILES), percentiles(acceptance, SPREAD_PERCENTILES)))
    fields.update(zip((f"tau_p{q}" for q in SPREAD_PERCENTILES), percentiles(tau, SPREAD_PERCENTILES)))
    return fields
