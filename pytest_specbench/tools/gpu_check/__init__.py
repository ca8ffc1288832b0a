"""The GPU check: one command that checks the whole CUDA path in minutes (what it checks and how to run it:
:mod:`.command`; docs/gpu.md).

In parts: ``plan`` (the checks, the CUDA and CPU forms, a check's result); ``legs`` (a part in a child
process, and what it left); ``run`` (the parent's state); ``parts`` and ``suite`` (the parts in order, the
suite's CUDA tests); ``judge`` and ``report`` (judging the parts' typed rows, summary.json / summary.md);
``command`` (the command line and the parent's course); ``inproc``, ``context``, ``environment``,
``timing_checks``, ``lossless_checks`` (the in-process child and its checks, the only modules that import torch;
their tiny models come from ``pytest_specbench.testing``).
"""

from .command import add_parser

__all__ = ["add_parser"]
