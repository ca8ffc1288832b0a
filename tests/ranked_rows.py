"""Typed rows of one pair timed in a block's rounds, for the tests of the answer (best k, ties, slower k) and of
what a schedule gives up: one builder, so both read rows made the same way."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from factory import case_result

from pytest_specbench.results.schema import COST_MODEL, CaseResult, field_default

#: a round's drift, shared by the cases of a round: pairing cancels it
ROUND_DRIFT = [1.0, 1.3, 0.8, 1.1, 0.9, 1.2, 1.05, 0.95]
#: each case's own noise: one cycle, rotated by the case's ``shift``, so its geometric mean over 8 rounds cancels
ROUND_WIGGLE = [1.01, 1.0, 1.02, 0.99, 1.01, 1.0, 0.99, 1.01]

#: what a row without round data holds (the committed run's row has them)
NO_ROUND_DATA = {
    "block": "",
    "block_rounds": [],
    "round_decode_token_s": [],
    "round_wall_s": [],
    "baseline_round_decode_token_s": [],
}


def cost_fields(k: int | str, flat_until: int = 5) -> dict[str, Any]:
    """Cost-model fields: every draft accepted, drafting free, a verify pass as cheap as one step up to
    ``flat_until`` positions and ten times dearer beyond: the model's best k is then ``flat_until - 1``. The
    others are unmeasured."""
    steps = 3 if isinstance(k, int) else 0
    drafted = k if isinstance(k, int) else 1
    unmeasured = {
        f.name: field_default(f.name) for f in dataclasses.fields(CaseResult) if f.metadata["group"] == COST_MODEL
    }
    return {
        **unmeasured,
        "verify_costs_ms": [1.0] * flat_until + [10.0] * (17 - flat_until),
        "cost_ratio": 0.0,
        "recommended_k": 4,
        "drafted_per_step": [0] + [drafted] * steps,
        "accepted_per_step": [0] + [drafted] * steps,
    }


def round_seconds(seconds: float, rounds: Sequence[int], shift: int) -> list[float]:
    """Seconds per decode token in each of ``rounds``: ``seconds`` under the round's drift and the case's noise."""
    return [seconds * ROUND_DRIFT[r] * ROUND_WIGGLE[(r + shift) % 8] for r in rounds]


def ranked_case(
    k: int | str,
    decode_speedup: float,
    *,
    prompt: str = "code",
    engine: str = "native",
    seconds: float | None = None,
    rounds: Sequence[int] = range(8),
    shift: int | None = None,
    flat_until: int = 5,
    **fields: Any,
) -> CaseResult:
    """Pair p's row at ``k`` on ``prompt``: ``decode_speedup`` (+-10% interval), end to end the same;
    :func:`cost_fields`;
    ``seconds``: its time per decode token before each round's drift, in block ``t:{prompt}`` over ``rounds``
    with a baseline per round (None: no round data). ``shift`` rotates its noise (by default by k)."""
    shift = (k if isinstance(k, int) else 5) if shift is None else shift
    timed = {}
    if seconds is not None:
        timed = {
            "block": f"t:{prompt}",
            "block_rounds": list(rounds),
            "round_decode_token_s": round_seconds(seconds, rounds, shift),
            "baseline_round_decode_token_s": [0.02 * ROUND_DRIFT[r] for r in rounds],
        }
    row = {
        "case": f"p-k{k}-{prompt}",
        "pair": "p",
        "target": "t",
        "draft": "d",
        "drafter": "model",
        "engine": engine,
        "prompt": prompt,
        "category": prompt,
        "k": k,
        "decode_speedup": decode_speedup,
        "decode_speedup_ci_low": decode_speedup * 0.9,
        "decode_speedup_ci_high": decode_speedup * 1.1,
        "speedup": decode_speedup,
        "speedup_ci_low": None,
        "speedup_ci_high": None,
        "acceptance_rate": 0.5,
        "tau": 1.5,
        "verdict": "lossless",
        "new_tokens": 32,
        "rounds": len(rounds),
        "baseline_decode_tps": 50.0,
        "decode_tps": 50.0 * decode_speedup,
        "unstable": False,
    }
    return case_result(**{**row, **NO_ROUND_DATA, **cost_fields(k, flat_until), **timed, **fields})
