"""The decoding engines a run may name, each declared once: its name, the traits the other layers ask of it, and
the options of its own settings with their check. measure/engines.py gives each declared engine its way of running
a case; no engine's name is compared outside its declaration and its module."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .llamacpp_settings import LLAMACPP_OPTIONS, check_llamacpp_settings
from .option import Option
from .vllm_settings import VLLM_OPTIONS, check_vllm_settings

#: (the engine's own settings by option field, the option names the user gave, whether the run uses the engine)
#: -> those settings resolved; a ConfigError saying what is accepted where they cannot serve
SettingsCheck = Callable[[dict[str, Any], frozenset[str], bool], dict[str, Any]]


@dataclass(frozen=True)
class EngineDeclaration:
    """One engine as the settings, the axes and the report know it."""

    name: str
    help: str  # what it is, for --specbench-engine's help
    # It runs on a server: a block of its cases holds every prompt of one (target, dtype, pair, k), so that one
    # server with that speculative config serves it (measure/served_case.py).
    served: bool = False
    # This package's own loop (engine/decoding.py) on its own kernels: the default, left out of a case's id; its
    # passes are the cost probe's, so only its rows carry kernel, bandwidth and cost-model figures.
    own_loop: bool = False
    # It samples by a rule of its own, which this package does not re-run: its sampled cases are not checked
    # against the target's distribution.
    own_sampling: bool = False
    # transformers' own assisted generation: the answer sets the own loop's k=auto beside its default schedule.
    library_schedule: bool = False
    options: tuple[Option, ...] = ()  # its own settings, read as any setting (``config.<field>``)
    check: SettingsCheck | None = None


ENGINE_DECLARATIONS: tuple[EngineDeclaration, ...] = (
    EngineDeclaration("native", "native (this package's loop)", own_loop=True),
    EngineDeclaration("hf", "hf (transformers' assisted generation)", own_sampling=True, library_schedule=True),
    EngineDeclaration(
        "vllm",
        "vllm (a vLLM server in its own environment: --specbench-vllm-python)",
        served=True,
        options=VLLM_OPTIONS,
        check=check_vllm_settings,
    ),
    EngineDeclaration(
        "llamacpp",
        "llamacpp (llama.cpp's llama-server on the GGUF files as shipped: --specbench-llamacpp-server)",
        served=True,
        options=LLAMACPP_OPTIONS,
        check=check_llamacpp_settings,
    ),
)
DECLARED: dict[str, EngineDeclaration] = {declaration.name: declaration for declaration in ENGINE_DECLARATIONS}

#: the decoding engines --specbench-engine accepts; measure/engines.py registers one engine per name
ENGINE_NAMES: tuple[str, ...] = tuple(DECLARED)
#: the engines that run on a server
SERVED_ENGINES: tuple[str, ...] = tuple(name for name, engine in DECLARED.items() if engine.served)
#: the engine that runs this package's own loop: the default
OWN_LOOP_ENGINE = next(name for name, engine in DECLARED.items() if engine.own_loop)
#: the engines that sample by a rule of their own
OWN_SAMPLING_ENGINES: tuple[str, ...] = tuple(name for name, engine in DECLARED.items() if engine.own_sampling)
#: the engine whose default schedule the answer sets beside the own loop's k=auto (None: none declared)
LIBRARY_SCHEDULE_ENGINE = next((name for name, engine in DECLARED.items() if engine.library_schedule), None)


def engines_in_words() -> str:
    """Every engine with what it is, as one list for a help text."""
    described = [engine.help for engine in ENGINE_DECLARATIONS]
    return f"{', '.join(described[:-1])} and {described[-1]}" if len(described) > 1 else described[0]


def runs_own_loop(engine: str) -> bool:
    """Whether ``engine`` is :data:`OWN_LOOP_ENGINE`, this package's loop on its own kernels."""
    return engine == OWN_LOOP_ENGINE
