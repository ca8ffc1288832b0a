"""The decoding engines' names and the traits code outside the engines asks by name: declared once, here, below the
option table and the axes that both read them (measure/engines.py registers one engine per name)."""

from __future__ import annotations

#: the decoding engines --specbench-engine accepts; measure/engines.py registers one engine per name
ENGINE_NAMES: tuple[str, ...] = ("native", "hf", "vllm")
#: the engines that run on a server: a block of theirs holds every prompt of one (target, dtype, pair, k), so that
#: one server with that speculative config serves it (measure/served_case.py)
SERVED_ENGINES: tuple[str, ...] = ("vllm",)
#: the engine that runs this package's own loop (engine/decoding.py) on its own kernels: the default, left out of
#: a case's id; its passes are the cost probe's, so only its rows carry kernel, bandwidth and cost-model figures
OWN_LOOP_ENGINE = ENGINE_NAMES[0]
#: the engines that sample by a rule of their own, which this package does not re-run: their sampled cases are
#: not checked against the target's distribution
OWN_SAMPLING_ENGINES: tuple[str, ...] = ("hf",)


def runs_own_loop(engine: str) -> bool:
    """Whether ``engine`` is :data:`OWN_LOOP_ENGINE`, this package's loop on its own kernels."""
    return engine == OWN_LOOP_ENGINE
