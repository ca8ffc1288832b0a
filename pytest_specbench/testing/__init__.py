"""Test support shared by the test suite (tests/factory.py), the tools (tools/gpu_check, tools/verify_curve) and
the scripts in benchmarks/.

It imports torch, transformers and tokenizers only (never pytest), so a fresh install of the package
with its test extra gives the tests and the benchmark scripts the same tiny models.
"""
