"""The llamacpp engine's own settings: the ``llama-server`` binary that starts its servers, more arguments for
them, or servers someone else runs; checked before any model loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .option import Option
from .parsing import ConfigError
from .server_options import ServedOptions, check_served_settings, endpoints, executable, find_program, shell_words

#: where scripts/make-llamacpp.sh builds llama-server, from the directory pytest runs in
LLAMACPP_BUILT_SERVER = Path(".llama.cpp") / "build" / "bin" / "llama-server"
#: the environment variable that names the binary where the option does not
LLAMACPP_SERVER_VARIABLE = "SPECBENCH_LLAMACPP_SERVER"

LLAMACPP_OPTIONS: tuple[Option, ...] = (
    Option(
        "llamacpp-server",
        "llamacpp_server",
        "the llamacpp engine: the llama-server binary that starts each server (default $SPECBENCH_LLAMACPP_SERVER, "
        "else .llama.cpp/build/bin/llama-server, which scripts/make-llamacpp.sh builds)",
        executable(
            "llama.cpp's llama-server binary (scripts/make-llamacpp.sh builds .llama.cpp/build/bin/llama-server)"
        ),
        metavar="PATH",
    ),
    Option(
        "llamacpp-args",
        "llamacpp_args",
        "the llamacpp engine: more arguments for every server, as shell words (e.g. '-ngl 99' on a GPU build); "
        "without -c the servers take a context of 4096",
        shell_words,
        "",
        metavar="ARGS",
        changes_results=True,
    ),
    Option(
        "llamacpp-endpoints",
        "llamacpp_endpoints",
        "the llamacpp engine: servers someone else runs instead of servers this run starts, as NAME=URL items: "
        "baseline (the target without speculation) and k<K> (the case's pair's method with K draft tokens at "
        "most), e.g. 'baseline=http://node:8080,k4=http://node:8081'; each must run with --metrics (docs/served.md)",
        endpoints,
        metavar="ENDPOINTS",
        unset=(),
        changes_results=True,
    ),
)

LLAMACPP_SERVED_OPTIONS = ServedOptions("llamacpp", "llamacpp-server", "llamacpp-args", "llamacpp-endpoints")


def check_llamacpp_settings(values: dict[str, Any], given: frozenset[str], runs: bool) -> dict[str, Any]:
    """The llamacpp engine's settings resolved (its binary found, and checked to run, where this run starts
    servers); a usage error where they contradict each other or cannot serve."""
    return check_served_settings(LLAMACPP_SERVED_OPTIONS, values, given, runs, _checked_server)


def find_llamacpp_server(given: Path | None) -> Path:
    """The binary: ``--specbench-llamacpp-server``, else ``$SPECBENCH_LLAMACPP_SERVER``, else
    :data:`LLAMACPP_BUILT_SERVER`; a usage error naming all three where none exists (before any model loads)."""
    return find_program(
        given,
        LLAMACPP_SERVER_VARIABLE,
        LLAMACPP_BUILT_SERVER,
        "--specbench-engine=llamacpp needs llama.cpp's llama-server (--specbench-llamacpp-server=PATH)",
        f"scripts/make-llamacpp.sh to build {LLAMACPP_BUILT_SERVER}",
    )


def _checked_server(given: Path | None) -> Path:
    from ..served.llamacpp_server import installed_version
    from ..served.process import ServerDied

    binary = find_llamacpp_server(given)
    try:
        installed_version(binary)
    except ServerDied as error:
        raise ConfigError(
            f"--specbench-llamacpp-server={binary}: {error}; accepted: llama.cpp's llama-server binary "
            "(scripts/make-llamacpp.sh builds one)"
        ) from None
    return binary
