"""The decoding engine: greedy and speculative decoding, drafters, cache rollback, stats; its kernels are a layer below
(pytest_specbench.kernels).

A plain library: imports torch and transformers, never pytest nor the rest of
this package (``from pytest_specbench import speculative_generate`` works in a notebook).
"""
