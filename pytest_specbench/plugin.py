"""pytest entry point of pytest-specbench (registered through ``pytest11``).

Hooks only: options, configuration, case generation and reporting are
mapped onto plain objects from the other modules.
"""
