"""The vllm engine's own settings: the interpreter of vLLM's environment that starts its servers, more arguments
for them, or servers someone else runs; checked before any model loads."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from .option import Option
from .parsing import ConfigError
from .server_options import endpoints, executable, shell_words

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


def check_vllm_settings(values: dict[str, Any], given: frozenset[str], runs: bool) -> dict[str, Any]:
    """The vllm engine's settings resolved (its interpreter found where this run starts servers); a usage error
    where they contradict each other or cannot serve."""
    values = dict(values)
    if values["vllm_endpoints"] and not runs:
        raise ConfigError(
            "--specbench-vllm-endpoints names servers for the vllm engine, which this run does not run; accepted: "
            "--specbench-engine=vllm (or a list with vllm) beside it"
        )
    started_only = [f"--specbench-{name}" for name in ("vllm-python", "vllm-args") if name in given]
    if values["vllm_endpoints"] and started_only:
        raise ConfigError(
            f"{' and '.join(started_only)} set up servers this run starts, and --specbench-vllm-endpoints names "
            "servers someone else runs, so this run starts none; accepted: one of the two"
        )
    if runs:
        if not values["vllm_endpoints"]:  # endpoints need no interpreter: this run starts no server
            values["vllm_python"] = vllm_interpreter(values["vllm_python"])
            check_vllm_installed(values["vllm_python"])
        if importlib.util.find_spec("prometheus_client") is None:
            raise ConfigError(
                "--specbench-engine=vllm reads the server's counters with prometheus-client, which is not "
                "installed; accepted: pip install 'pytest-specbench[served]'"
            )
    return values


def vllm_interpreter(given: Path | None) -> Path:
    """The vllm engine's interpreter: ``--specbench-vllm-python``, else ``$SPECBENCH_VLLM_PYTHON``, else
    :data:`VLLM_VENV_PYTHON`; a usage error naming all three where none exists (before any model loads)."""
    if given is not None:
        return given
    from_env = os.environ.get("SPECBENCH_VLLM_PYTHON", "").strip()
    candidate = Path(from_env).expanduser() if from_env else VLLM_VENV_PYTHON
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate.absolute()
    where = f"$SPECBENCH_VLLM_PYTHON ({from_env})" if from_env else f"{VLLM_VENV_PYTHON} (none here)"
    raise ConfigError(
        f"--specbench-engine=vllm needs vLLM's own environment, and {where} is no interpreter; accepted: "
        "--specbench-vllm-python=PATH, $SPECBENCH_VLLM_PYTHON, or scripts/make-vllm-env.sh cpu (or cuda) to make "
        f"{VLLM_VENV_PYTHON}"
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
