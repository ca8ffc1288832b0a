"""Loading target and draft models by name, without ever hanging on the network.

A model source is one of:

* a Hugging Face hub id (``"gpt2"``, ``"org/name"``), read from the local
  hub cache (``HF_HUB_CACHE`` / ``HF_HOME``); downloaded only when the cache
  lacks it, ``HF_HUB_OFFLINE`` is not set and the hub answers a quick probe;
* a local checkpoint directory (``config.json`` + weights + tokenizer);
* a ``.gguf`` file, dequantised once and cached (:mod:`.gguf_cache`);
* an embedded name, ``"embedded:gemma3-270m"`` (:mod:`.embedded`).

:func:`model_available` answers "could this load?" from the file system
alone, so a caller can skip a model before paying for loading anything.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from .base import DTYPE_NAMES, ModelUnavailable
from .chunks import ChunkedGGUF
from .embedded import EMBEDDED_MODELS
from .gguf_cache import cached_entry, ensure_converted, load_gguf, memoised_sha256, resolve_cache_dir
from .weight_pages import into_huge_pages

__all__ = [
    "model_folder",
    "DTYPES",
    "EMBEDDED_MODELS",
    "LoadedModel",
    "ModelUnavailable",
    "hub_cache_dir",
    "hub_offline",
    "load_model",
    "model_available",
    "resolve_dtype",
]

#: dtype names accepted by :func:`load_model`
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}

#: seconds to wait for the hub before calling it unreachable
HUB_PROBE_TIMEOUT_S = 3.0

_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
_TRUE = {"1", "on", "yes", "true"}


@dataclass
class LoadedModel:
    """A model ready for inference (eval mode, on its device) and its tokenizer.

    ``source`` says where it came from: ``"hub-cache"``, ``"hub-download"``,
    ``"local"``, ``"gguf-converted"`` (converted by this load) or
    ``"gguf-cache"`` (a conversion from an earlier run).
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    load_time_s: float
    source: str


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """The torch dtype for a name in :data:`DTYPES` (a torch dtype passes if allowed)."""
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(f"unsupported dtype {dtype!r}; choose one of {', '.join(DTYPES)}")


# --- environment --------------------------------------------------------------


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set, read now.

    huggingface_hub reads its constants once at import, so an environment
    changed later (tests, pytest plugins) is read here directly as well.
    """
    from huggingface_hub import constants

    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""))
    return any(flag.strip().lower() in _TRUE for flag in flags) or bool(constants.HF_HUB_OFFLINE)


def hub_cache_dir() -> Path:
    """The hub cache: ``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else the XDG/home default."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def _hub_endpoint() -> str:
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT") or constants.ENDPOINT


def _hub_reachable(endpoint: str, timeout: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the hub opens within ``timeout`` seconds.

    Runs in a daemon thread because name resolution (getaddrinfo) ignores
    socket timeouts and can block for a long time on a broken resolver.
    Only a cheap first answer: a reachable host may still refuse the download.
    """
    url = urlparse(endpoint)
    host = url.hostname
    if not host:
        return False
    port = url.port or (443 if url.scheme == "https" else 80)
    # Behind a proxy the hub itself is not directly reachable: probe the proxy.
    proxy = urllib.request.getproxies().get(url.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        proxy_url = urlparse(proxy if "://" in proxy else f"http://{proxy}")
        if proxy_url.hostname:
            host, port = proxy_url.hostname, proxy_url.port or (443 if proxy_url.scheme == "https" else 80)
    result: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, name="specbench-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])


# --- classifying sources ------------------------------------------------------


def _is_embedded(source: str) -> bool:
    return source.startswith("embedded:")


def _embedded(source: str) -> ChunkedGGUF:
    if source not in EMBEDDED_MODELS:
        raise ValueError(f"unknown embedded model {source!r}; available: {', '.join(EMBEDDED_MODELS)}")
    return EMBEDDED_MODELS[source]


def _looks_like_path(source: str) -> bool:
    # A hub id is "name" or "org/name"; anything else path-shaped is meant as a path.
    return (
        source.endswith(".gguf")
        or source.startswith(("/", "./", "../", "~"))
        or source.count("/") > 1
        or "\\" in source
    )


def _checkpoint_problem(folder: Path) -> str | None:
    """What a checkpoint directory lacks to be loadable, or None."""
    if not (folder / "config.json").is_file():
        return "has no config.json"
    weights = [name for name in _WEIGHT_FILES if (folder / name).is_file()]
    if not weights:
        return f"has no weights ({' or '.join(_WEIGHT_FILES[::2])})"
    index = next((name for name in weights if name.endswith(".index.json")), None)
    if index is not None and index == weights[0]:
        try:
            shards = set(json.loads((folder / index).read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, AttributeError):
            return f"has an unreadable {index}"
        missing = sorted(shard for shard in shards if not (folder / shard).is_file())
        if missing:
            return f"lacks weight shards {', '.join(missing)}"
    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        return "has no tokenizer files"
    return None


def _cached_snapshot(repo_id: str, revision: str | None) -> tuple[Path | None, str | None]:
    """``(folder, None)`` for a complete local snapshot, else ``(None, reason)``."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError

    try:
        folder = Path(snapshot_download(repo_id, revision=revision, cache_dir=hub_cache_dir(), local_files_only=True))
    except HFValidationError:
        return None, "is neither an existing local path nor a valid Hugging Face hub id"
    except (OSError, ValueError):
        return None, "is not in the local Hugging Face cache"
    problem = _checkpoint_problem(folder)
    if problem is not None:
        return None, f"is only partly in the local Hugging Face cache (the snapshot {problem})"
    return folder, None


def _hub_hint(repo_id: str, revision: str | None) -> str:
    return f"hf download {repo_id}" + (f" --revision {revision}" if revision else "")


def _gguf_package_installed() -> bool:
    return importlib.util.find_spec("gguf") is not None


def _unavailable(
    source: str, *, revision: str | None = None, cache_dir: Path | None = None, probe_hub: bool = True
) -> ModelUnavailable | None:
    """Why ``source`` cannot be loaded, judged from files and the hub probe only."""
    cache = resolve_cache_dir(cache_dir)
    if _is_embedded(source):
        if source not in EMBEDDED_MODELS:
            return ModelUnavailable(source, f"is not an embedded model; available: {', '.join(EMBEDDED_MODELS)}")
        model = _embedded(source)
        if not model.installed():
            return model.missing()
        if not _gguf_package_installed() and cached_entry(model.expected_sha256(), cache_dir=cache) is None:
            return ModelUnavailable(
                source, "needs the gguf package for its first conversion", model.hint, hint_label="install it with"
            )
        return None

    path = Path(source).expanduser()
    if path.exists():
        if path.is_file():
            if path.suffix != ".gguf":
                return ModelUnavailable(source, "is a file but not a .gguf checkpoint")
            if not _gguf_package_installed():
                known = memoised_sha256(path, cache_dir=cache)
                if known is None or cached_entry(known, cache_dir=cache) is None:
                    return ModelUnavailable(
                        source,
                        "is a GGUF file and converting it needs the gguf package",
                        "pip install gguf",
                        hint_label="install it with",
                    )
            return None
        problem = _checkpoint_problem(path)
        return ModelUnavailable(source, f"is a directory that {problem}") if problem else None
    if _looks_like_path(source):
        return ModelUnavailable(source, "does not exist (no such file or directory)")

    folder, reason = _cached_snapshot(source, revision)
    if folder is not None:
        return None
    hint = _hub_hint(source, revision)
    if reason and "valid Hugging Face hub id" in reason:
        return ModelUnavailable(source, reason)
    if hub_offline():
        return ModelUnavailable(source, f"{reason} and the hub is unreachable (HF_HUB_OFFLINE=1)", hint)
    if not probe_hub:
        return ModelUnavailable(source, str(reason), hint)
    endpoint = _hub_endpoint()
    if not _hub_reachable(endpoint):
        return ModelUnavailable(
            source,
            f"{reason} and the hub ({endpoint}) could not be reached (probe timeout {HUB_PROBE_TIMEOUT_S:g} s)",
            hint,
        )
    return None


def model_available(
    source: str, *, revision: str | None = None, cache_dir: Path | None = None, probe_hub: bool = True
) -> str | None:
    """None if ``source`` can be loaded, else a one-line reason (with the fix).

    Loads nothing: looks at the local files, and for a hub id missing from
    the cache, probes the hub for a few seconds (unless ``HF_HUB_OFFLINE``,
    or ``probe_hub=False``, which calls such a model unavailable at once).
    """
    problem = _unavailable(source, revision=revision, cache_dir=cache_dir, probe_hub=probe_hub)
    return None if problem is None else str(problem)


def source_identity(source: str, *, revision: str | None = None, cache_dir: Path | None = None) -> dict[str, object]:
    """What model ``source`` names, to tell whether two runs read the same one; loads nothing.

    A local GGUF file or checkpoint folder is its files' sha256 (memoised by path, size and mtime: each file
    is hashed once per machine), not where it lies, so weights rewritten in place are another model and a
    moved folder is the same one; an embedded model is the sha256 its package declares; a hub id is its name
    and revision (the hub is not asked which commit that is). A source missing here is its name alone.
    """
    from .gguf_cache import file_sha256

    path = Path(source).expanduser()
    if _is_embedded(source):
        try:
            return {"embedded": source, "sha256": _embedded(source).expected_sha256()}
        except (ImportError, AttributeError, ValueError):
            return {"embedded": source}  # not installed, or unknown: the case cannot run either
    if path.is_file():
        return {"sha256": file_sha256(path, cache_dir=resolve_cache_dir(cache_dir))}
    if path.is_dir():
        files = sorted(
            child
            for child in path.iterdir()
            if child.is_file() and not child.name.startswith(".") and child.suffix != ".md"
        )
        cache = resolve_cache_dir(cache_dir)
        return {"files": {child.name: file_sha256(child, cache_dir=cache) for child in files}}
    return {"source": source, "revision": revision}


# --- loading --------------------------------------------------------------------


def _load_pretrained(location: str, dtype: torch.dtype, **kwargs) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    model = AutoModelForCausalLM.from_pretrained(location, dtype=dtype, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(location, **kwargs)
    return model, tokenizer


def _load_from_hub(
    repo_id: str, dtype: torch.dtype, revision: str | None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
    folder, _ = _cached_snapshot(repo_id, revision)
    if folder is not None:
        # Load the snapshot folder as a plain directory: no hub request at all.
        return (*_load_pretrained(str(folder), dtype), "hub-cache")
    problem = _unavailable(repo_id, revision=revision)
    if problem is not None:
        raise problem
    try:
        model, tokenizer = _load_pretrained(repo_id, dtype, revision=revision, cache_dir=str(hub_cache_dir()))
    except OSError as error:  # gated, missing, or the connection dropped mid-way
        raise ModelUnavailable(
            repo_id, f"could not be downloaded from the hub ({error})", _hub_hint(repo_id, revision)
        ) from error
    return model, tokenizer, "hub-download"


def load_model(
    source: str,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    revision: str | None = None,
    cache_dir: Path | None = None,
) -> LoadedModel:
    """Load a causal LM and its tokenizer, in eval mode, on ``device``, in ``dtype``.

    ``source`` is a hub id, a checkpoint directory, a ``.gguf`` file or an
    embedded name (see the module docstring). ``revision`` applies to hub
    ids only. ``cache_dir`` is the pytest-specbench cache (GGUF conversions,
    the assembled embedded model), default :func:`~.gguf_cache.default_cache_dir`;
    hub ids always use the Hugging Face cache (``HF_HOME`` / ``HF_HUB_CACHE``).
    On a CPU the weights then move into 2 MB pages where the system gives them
    (:mod:`.weight_pages`; :func:`~.weight_pages.pages_of` says what it did).

    Raises :class:`ModelUnavailable` (quickly, never hanging) when the model
    is not on this machine and cannot be fetched or is no embedded model, and
    ``ValueError`` for a bad ``dtype``.
    """
    torch_dtype = resolve_dtype(dtype)
    target_device = torch.device(device)
    cache = resolve_cache_dir(cache_dir)
    path = Path(source).expanduser()
    is_hub_id = not (_is_embedded(source) or path.exists() or _looks_like_path(source))
    if revision is not None and not is_hub_id:
        raise ValueError(f"revision={revision!r} applies to hub ids only, not to {source!r}")
    start = time.perf_counter()
    if _is_embedded(source):
        problem = _unavailable(source, cache_dir=cache)
        if problem is not None:
            raise problem
        embedded = _embedded(source)
        model, tokenizer, kind = load_gguf(
            lambda: embedded.gguf_path(cache),
            sha256=embedded.expected_sha256(),
            cache_dir=cache,
            dtype=torch_dtype,
        )
    elif path.exists():
        problem = _unavailable(source, cache_dir=cache)
        if problem is not None:
            raise problem
        if path.is_file():
            model, tokenizer, kind = load_gguf(path, cache_dir=cache, dtype=torch_dtype)
        else:
            model, tokenizer = _load_pretrained(str(path), torch_dtype)
            kind = "local"
    elif not is_hub_id:
        raise ModelUnavailable(source, "does not exist (no such file or directory)")
    else:
        model, tokenizer, kind = _load_from_hub(source, torch_dtype, revision)
    # Device only: from_pretrained already applied dtype, and casting again would
    # also cast the float32 buffers (rotary inv_freq) it deliberately keeps.
    model.to(target_device)
    model.eval()
    if target_device.type == "cpu":
        into_huge_pages(model)
    return LoadedModel(
        model=model, tokenizer=tokenizer, name=source, load_time_s=time.perf_counter() - start, source=kind
    )


def parameter_count(source: str, *, revision: str | None = None, cache_dir: Path | None = None) -> int | None:
    """How many weights ``source`` holds, read from its files' headers without loading it (a GGUF's tensor table, a
    safetensors checkpoint's header); None where they cannot tell (a hub id not in the cache, ``.bin`` weights)."""
    try:
        if _is_embedded(source):
            path: Path | None = _embedded(source).gguf_path(resolve_cache_dir(cache_dir))
        else:
            path = Path(source).expanduser()
            if not path.exists():
                path = None if _looks_like_path(source) else _cached_snapshot(source, revision)[0]
        if path is None:
            return None
        if path.is_file():
            from gguf import GGUFReader

            return sum(int(tensor.n_elements) for tensor in GGUFReader(path).tensors)
        from safetensors import safe_open

        files = sorted(path.glob("*.safetensors"))
        if not files:
            return None
        count = 0
        for file in files:
            with safe_open(file, framework="pt") as weights:
                for name in weights.keys():
                    count += math.prod(weights.get_slice(name).get_shape())
        return count
    except Exception:  # noqa: BLE001 - a count is a courtesy; the load itself reports what is wrong
        return None


def gguf_file(source: str, *, cache_dir: Path | None = None) -> Path:
    """The GGUF file of ``source`` as it was made (quantised as shipped), for a server that reads GGUF files
    (llama.cpp): an embedded model's joined file, or a ``.gguf`` path. :class:`ModelUnavailable` where there is none
    (a checkpoint folder, a hub id: converting one to GGUF would not be the file users run)."""
    cache = resolve_cache_dir(cache_dir)
    if _is_embedded(source):
        return _embedded(source).gguf_path(cache)
    path = Path(source).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path.resolve()
    raise ModelUnavailable(
        source, "it is no GGUF file; llama.cpp serves GGUF files (an embedded model, or a path ending in .gguf)"
    )


def gguf_quantisation(path: Path) -> str:
    """The quantisation a GGUF file says it was made in (``Q4_K_M``, ``F16``), from its ``general.file_type``;
    ``unknown`` where it says none."""
    from gguf import GGUFReader, LlamaFileType

    field = GGUFReader(path).fields.get("general.file_type")
    if field is None:
        return "unknown"
    try:
        return LlamaFileType(int(field.parts[field.data[0]][0])).name.removeprefix("MOSTLY_")
    except ValueError:
        return "unknown"


def model_folder(source: str, *, revision: str | None = None, cache_dir: Path | None = None) -> Path:
    """The local folder of ``source`` in transformers' format (config, safetensors, tokenizer), for a server that
    reads folders (vLLM): a checkpoint folder itself, a GGUF file's or an embedded model's converted entry in the
    cache (converting it once), or a hub id's cached snapshot. :class:`ModelUnavailable` where there is none."""
    cache = resolve_cache_dir(cache_dir)
    problem = _unavailable(source, revision=revision, cache_dir=cache, probe_hub=False)
    if problem is not None:
        raise problem
    path = Path(source).expanduser()
    if _is_embedded(source):
        embedded = _embedded(source)
        return ensure_converted(lambda: embedded.gguf_path(cache), sha256=embedded.expected_sha256(), cache_dir=cache)[
            0
        ]
    if path.is_file():
        return ensure_converted(path, cache_dir=cache)[0]
    if path.is_dir():
        return path.resolve()
    folder, reason = _cached_snapshot(source, revision)
    if folder is None:
        raise ModelUnavailable(source, str(reason))
    return folder
