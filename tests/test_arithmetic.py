"""The matmul arithmetic probe and the least time a pass can take (engine/arithmetic.py)."""

from __future__ import annotations

import math

import pytest
import torch

from pytest_specbench.engine import arithmetic
from pytest_specbench.engine.arithmetic import matmul_gflops, pass_floor_s


def test_one_row_is_bound_by_the_read_and_many_rows_by_the_multiplies():
    # 4 GB of float32 weights (1e9 of them), read at 40 GB/s: 0.1 s. Multiplied at 200 GFLOP/s: 0.01 s a row.
    assert pass_floor_s(4 * 10**9, 4, 1, 40.0, 200.0) == pytest.approx(0.1)
    assert pass_floor_s(4 * 10**9, 4, 10, 40.0, 200.0) == pytest.approx(0.1)  # the two meet at 10 rows
    assert pass_floor_s(4 * 10**9, 4, 20, 40.0, 200.0) == pytest.approx(0.2)
    # bfloat16: half the bytes for as many weights, so half the read and the same multiplies.
    assert pass_floor_s(2 * 10**9, 2, 1, 40.0, 200.0) == pytest.approx(0.05)
    assert pass_floor_s(2 * 10**9, 2, 20, 40.0, 200.0) == pytest.approx(0.2)


def test_the_matmul_rate_is_positive_finite_and_measured_once_per_dtype():
    before = arithmetic._gflops.cache_info().misses
    rates = {dtype: matmul_gflops("cpu", dtype) for dtype in (torch.float32, torch.bfloat16)}
    assert all(rate > 0 and math.isfinite(rate) for rate in rates.values())
    assert matmul_gflops(torch.device("cpu"), torch.float32) == rates[torch.float32]
    assert arithmetic._gflops.cache_info().misses - before <= 2
