"""The vllm engine's own settings: the interpreter of vLLM's environment that starts its servers, more arguments
for them, or servers someone else runs; checked before any model loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .option import Option
from .parsing import ConfigError
from .server_options import ServedOptions, check_served_settings, endpoints, executable, find_program, shell_words

#: where scripts/make-vllm-env.sh puts vLLM's environment, from the directory pytest runs in
VLLM_VENV_PYTHON = Path(".venv-vllm") / "bin" / "python"

VLLM_OPTIONS: tuple[Option, ...] = (
    Option(
        "vllm-python",
        "vllm_python",
        "the vllm engine: the Python interpreter of vLLM's own environment, which starts each server "
        "(default $SPECBENCH_VLLM_PYTHON, else .venv-vllm/bin/python, which scripts/make-vllm-env.sh makes)",
        executable(
            "the Python interpreter of vLLM's environment (scripts/make-vllm-env.sh makes .venv-vllm/bin/python)"
        ),
        metavar="PATH",
    ),
    Option(
        "vllm-args",
        "vllm_args",
        "the vllm engine: more arguments for every server, as shell words (e.g. '--tensor-parallel-size 8'); "
        "without --max-model-len the servers take 4096",
        shell_words,
        "",
        metavar="ARGS",
        changes_results=True,
    ),
    Option(
        "vllm-endpoints",
        "vllm_endpoints",
        "the vllm engine: servers someone else runs instead of servers this run starts, as NAME=URL items: "
        "baseline (the target without speculation) and k<K> (the case's pair's method with K speculative "
        "tokens), e.g. 'baseline=http://node:8000,k4=http://node:8001'; each is checked against the case (its "
        "model at /v1/models, its draft length on /metrics) before it is measured (docs/served.md)",
        endpoints,
        metavar="ENDPOINTS",
        unset=(),
        changes_results=True,
    ),
)


VLLM_SERVED_OPTIONS = ServedOptions("vllm", "vllm-python", "vllm-args", "vllm-endpoints")


def check_vllm_settings(values: dict[str, Any], given: frozenset[str], runs: bool) -> dict[str, Any]:
    """The vllm engine's settings resolved (its interpreter found, and checked to hold vLLM, where this run starts
    servers); a usage error where they contradict each other or cannot serve."""
    return check_served_settings(VLLM_SERVED_OPTIONS, values, given, runs, _checked_interpreter)


def _checked_interpreter(given: Path | None) -> Path:
    python = vllm_interpreter(given)
    check_vllm_installed(python)
    return python


def vllm_interpreter(given: Path | None) -> Path:
    """The vllm engine's interpreter: ``--specbench-vllm-python``, else ``$SPECBENCH_VLLM_PYTHON``, else
    :data:`VLLM_VENV_PYTHON`; a usage error naming all three where none exists (before any model loads)."""
    return find_program(
        given,
        "SPECBENCH_VLLM_PYTHON",
        VLLM_VENV_PYTHON,
        "--specbench-engine=vllm needs vLLM's own environment (--specbench-vllm-python=PATH, its interpreter)",
        f"scripts/make-vllm-env.sh cpu (or cuda) to make {VLLM_VENV_PYTHON}",
    )


def check_vllm_installed(python: Path) -> None:
    """A usage error, before any model loads, where ``python`` does not run or has no vLLM (``/bin/false``, another
    environment's Python): each case would otherwise fail when its server starts."""
    from ..served.vllm_server import ServerDied, installed_version

    try:
        installed_version(python)
    except ServerDied as error:
        raise ConfigError(
            f"--specbench-vllm-python={python}: {error}; accepted: the Python interpreter of an environment with "
            "vLLM (scripts/make-vllm-env.sh cpu, or cuda, makes .venv-vllm)"
        ) from None
