"""gpu_check, the GPU readiness command (``python benchmarks/gpu_check.py``, docs/gpu.md), in parts:

- plan: the checks, the CUDA and CPU forms, a check's result;
- legs, parent: the parts run in child processes with time budgets, and the parent's run of them;
- judge, report: judging what the parts left, and summary.json / summary.md;
- cli: the command line and the parent's course;
- inproc, context, environment, timing_checks, lossless_checks: the in-process child and its checks
  (the only modules that import torch; their tiny models come from pytest_specbench.testing).
"""
