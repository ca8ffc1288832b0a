"""``vllm serve`` started from the interpreter of its own environment, healthy before use, stopped on every path."""

from __future__ import annotations

import atexit
import dataclasses
import functools
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

#: what a server may take to answer /health after its start (loading, warm-up; a CPU build compiles kernels)
STARTUP_TIMEOUT_S = 600.0
#: how long a stopped server gets between SIGTERM and SIGKILL
STOP_GRACE_S = 20.0
LOG_TAIL_CHARS = 3000


class ServerDied(RuntimeError):
    """The server exited, or never answered: the message names its log and ends with the log's tail."""


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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class VllmServer:
    """A running ``vllm serve``: ``with VllmServer(spec, log) as server: server.url``. Started in its own process
    group so that stopping it stops its engine processes too; its output goes to ``log_path``."""

    def __init__(
        self, spec: ServerSpec, log_path: Path, startup_timeout_s: float = STARTUP_TIMEOUT_S, port: int | None = None
    ) -> None:
        self.spec = spec
        self.log_path = Path(log_path)
        self.startup_timeout_s = startup_timeout_s
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen | None = None
        self._group: int | None = None  # the server's process group: its engine processes can outlive it

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start the server and wait until /health answers; :class:`ServerDied` where it exits or times out."""
        if not self.spec.python.is_file():
            raise ServerDied(f"no vLLM interpreter at {self.spec.python} (docs/served.md says how to make one)")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        env.pop("PYTHONPATH", None)  # this environment's packages must not shadow the server's
        if self.spec.cpu_kv_cache_gib is not None:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(self.spec.cpu_kv_cache_gib)
        env.update(self.spec.env)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                self.spec.command(self.port),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        self._group = self._process.pid
        _LIVE.add(self)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            self.check_alive("while starting")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        raise ServerDied(self._describe(f"did not answer /health within {self.startup_timeout_s:.0f} s"))

    def check_alive(self, when: str = "") -> None:
        """:class:`ServerDied` where the server's process has exited."""
        if self._process is not None and self._process.poll() is not None:
            status = self._process.returncode
            raise ServerDied(self._describe(f"exited with status {status}{' ' + when if when else ''}"))

    @property
    def served_name(self) -> str:
        return self.spec.served_name

    @property
    def failure_note(self) -> str:
        """What an error adds to say where to look."""
        return f"the server's log: {self.log_path}"

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after the grace or on an interruption, and SIGKILL to
        whatever of the group is left once its main process is gone; safe to call twice."""
        process, group = self._process, self._group
        if process is None or group is None:
            return
        try:
            if process.poll() is None:
                _signal_group(group, signal.SIGTERM)
                try:
                    process.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
        finally:  # an interruption during the grace still ends the group
            _signal_group(group, signal.SIGKILL)
            process.wait()
            self._process = self._group = None
            _LIVE.discard(self)

    def _describe(self, what: str) -> str:
        try:
            tail = self.log_path.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            tail = ""
        return f"the vLLM server for {self.spec.model} {what}; its log: {self.log_path}\n{tail}"


def _signal_group(group: int, sig: int) -> None:
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        pass


#: the servers started and not yet stopped: stopped at the interpreter's exit, whatever ended it short of SIGKILL
_LIVE: set[VllmServer] = set()


@atexit.register
def _stop_live() -> None:
    for server in list(_LIVE):
        server.stop()
