"""The tools a user runs, as subcommands of ``python -m pytest_specbench`` (cli.py registers them):

- ``verify-curve`` (:mod:`.verify_curve`): a target's verify-cost curve v(m) per dtype and kernel form;
- ``gpu-check`` (:mod:`.gpu_check`): the GPU readiness check, the whole CUDA path in minutes.

A front end beside plugin/ and cli.py: it may import engine/, models/, settings/, results/, measure/ and report/;
nothing below imports it. Each tool's package root registers its subcommand without importing torch, so
``merge`` and ``compare`` start as fast as before.
"""
