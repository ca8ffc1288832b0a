"""``vllm serve`` started from the interpreter of its own environment, healthy before use, stopped on every path."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .process import LOG_TAIL_CHARS, STARTUP_TIMEOUT_S, STOP_GRACE_S, ServerDied, ServerProcess, free_port

__all__ = [
    "LOG_TAIL_CHARS",
    "STARTUP_TIMEOUT_S",
    "STOP_GRACE_S",
    "ServerDied",
    "ServerSpec",
    "VllmServer",
    "free_port",
    "installed_version",
]


@dataclass(frozen=True)
class ServerSpec:
    """One server's configuration: which environment, weights and dtype, and its speculative config (None: the
    target alone, the baseline). ``extra_args`` go to ``vllm serve`` as given (``--tensor-parallel-size 8``)."""

    python: Path
    model: Path
    dtype: str
    speculative: dict | None = None
    extra_args: tuple[str, ...] = ()
    max_model_len: int | None = None
    #: a CPU server's KV cache in whole GiB (vLLM's VLLM_CPU_KVCACHE_SPACE, an integer); None: vLLM's own choice,
    #: which on a CPU is most of the machine's memory, so a second server beside it is killed for memory
    cpu_kv_cache_gib: int | None = None
    #: more environment for the server, over this process's (whose PYTHONPATH it never gets): (name, value) pairs
    env: tuple[tuple[str, str], ...] = ()

    def command(self, port: int) -> list[str]:
        """The OpenAI-compatible server of ``vllm serve``, through the environment's interpreter. Its module, not
        the ``vllm`` command: that reads the version of a distribution named ``vllm``, which ``vllm-cpu`` is not."""
        command = [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model),
            "--host", "127.0.0.1", "--port", str(port), "--dtype", self.dtype, "--seed", "0",
            "--served-model-name", self.served_name,
        ]  # fmt: skip
        if self.max_model_len is not None:
            command += ["--max-model-len", str(self.max_model_len)]
        if self.speculative is not None:
            command += ["--speculative-config", json.dumps(self.speculative, sort_keys=True)]
        return command + list(self.extra_args)

    @property
    def identity(self) -> str:
        """Every setting, as one string: two specs that start the same server have the same one."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)

    @property
    def served_name(self) -> str:
        return self.model.name or str(self.model)

    #: what its log files are named after
    log_name = "vllm"

    def new_server(self, log_path: Path) -> VllmServer:
        """A server of this spec, not started yet, its output to ``log_path``."""
        return VllmServer(self, log_path)


#: asks an interpreter for the version of its installed vLLM distribution, without importing vLLM
_VERSION_QUERY = (
    "import importlib.metadata as m\n"
    "for name in ('vllm', 'vllm-cpu'):\n"
    "    try:\n"
    "        print(name, m.version(name)); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "else:\n"
    "    raise SystemExit('no vllm distribution is installed')\n"
)


@functools.cache
def installed_version(python: Path) -> str:
    """``vllm 0.x.y`` or ``vllm-cpu 0.x.y``: the distribution the interpreter ``python`` has; :class:`ServerDied`
    where it has none or cannot be run."""
    try:
        done = subprocess.run([str(python), "-c", _VERSION_QUERY], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ServerDied(f"{python} could not be run to read vLLM's version: {error}") from error
    version = done.stdout.strip()
    if done.returncode != 0 or not version.startswith("vllm"):
        said = (done.stderr or done.stdout).strip()[-500:] or f"exit status {done.returncode}, no output"
        raise ServerDied(f"{python} has no vLLM: {said}")
    return version


class VllmServer(ServerProcess):
    """A running ``vllm serve``, from the interpreter of vLLM's own environment."""

    kind = "vLLM server"
    spec: ServerSpec

    def check_startable(self) -> None:
        if not self.spec.python.is_file():
            raise ServerDied(f"no vLLM interpreter at {self.spec.python} (docs/served.md says how to make one)")

    def environment(self) -> dict[str, str]:
        env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        env.pop("PYTHONPATH", None)  # this environment's packages must not shadow the server's
        if self.spec.cpu_kv_cache_gib is not None:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(self.spec.cpu_kv_cache_gib)
        env.update(self.spec.env)
        return env
