"""ModelStore: each model loaded once per (model, dtype, device); drafters and the target's greedy references built
once per dtype."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import torch

from ..cases.drafter_kinds import kind_of
from ..cases.matrix import Case
from ..cases.pairs import PairSpec
from ..engine.drafters import Drafter
from ..kernels.bandwidth import MAX_BUFFER_BYTES, memory_read_gbps, read_buffer_bytes
from ..kernels.verify_forms import KernelForms
from ..models.base import UnrunnableCase
from ..models.loading import LoadedModel, load_model, parameter_count, resolve_dtype
from ..served.pool import ServerPool
from .memory import available_memory_bytes, held_weight_bytes
from .verdicts import reference_tokens


class ModelStore:
    """Loads on first use and keeps what it loaded for the whole session.

    Keys include the device and dtype, so a model shared by two pairs (gpt2 is a target in one and a draft in
    another) is loaded once, and once more for each other dtype a case asks for. ``dtype`` is what a caller that
    names none gets; a pair with its own dtype (``PairSpec.dtype``) always runs in that one.
    """

    def __init__(self, device: str, dtype: str = "float32", cache_dir: Path | None = None) -> None:
        self.device = device
        self.dtype = dtype
        self.cache_dir = cache_dir
        self.load_counts: Counter[str] = Counter()  # by "source (dtype)"
        self._models: dict[tuple, LoadedModel] = {}
        self._drafters: dict[tuple[str, str], Drafter] = {}
        self._overlaps: dict[str, float] = {}  # by pair name
        self._references: dict[tuple, list[int]] = {}
        self._kernel_forms: dict[tuple[int, str], KernelForms] = {}  # by (id of a loaded model, kernel setting)
        self._servers: ServerPool | None = None
        self.weights_held_peak_bytes = 0  # the most weight bytes its models and drafters held at once

    def servers(self) -> ServerPool:
        """The served engines' servers, started on first use and kept for the session (:meth:`close` stops them);
        their logs go to a folder of their own under the system's temporary folder."""
        if self._servers is None:
            import tempfile

            self._servers = ServerPool(Path(tempfile.mkdtemp(prefix="specbench-servers-")))
        return self._servers

    def close(self) -> None:
        """Stop the servers this store started."""
        if self._servers is not None:
            self._servers.stop_all()

    def dtype_for(self, case: Case) -> str:
        """The dtype a case's models run in: its pair's own, else the case's."""
        return self.pair_dtype(case.pair, case.dtype)

    def pair_dtype(self, pair: PairSpec, dtype: str | None = None) -> str:
        """The pair's own dtype, else ``dtype``, else the store's."""
        return pair.dtype or dtype or self.dtype

    def model(self, source: str, revision: str | None = None, dtype: str | None = None) -> LoadedModel:
        dtype = dtype or self.dtype
        key = (source, revision, dtype, self.device)
        if key not in self._models:
            needed = self._check_room(source, revision, dtype)
            if needed is not None:
                self._read_before_loading(needed)
            loaded = load_model(source, device=self.device, dtype=dtype, revision=revision, cache_dir=self.cache_dir)
            # Every dtype of a model tokenizes alike: one tokenizer (a large vocabulary's is hundreds of MB).
            same = next((held for other, held in self._models.items() if other[:2] == key[:2]), None)
            if same is not None:
                loaded.tokenizer = same.tokenizer
            self._models[key] = loaded
            self.load_counts[f"{source} ({dtype})"] += 1
            self._note_held()
        return self._models[key]

    def _held_models(self) -> list[torch.nn.Module]:
        drafts = [drafter.model for drafter in self._drafters.values() if drafter.model is not None]
        return [loaded.model for loaded in self._models.values()] + drafts

    def _note_held(self) -> None:
        self.weights_held_peak_bytes = max(self.weights_held_peak_bytes, held_weight_bytes(self._held_models()))

    def _read_before_loading(self, nbytes: int) -> None:
        """Time the memory read of a model of ``nbytes`` now, where its buffer sits beside no weights: the read
        is kept per buffer size, so the cost probe's later read of the loaded model is this one. Only where the
        buffer reaches its cap (a smaller model's size is its own weights', which this figure does not know)."""
        if read_buffer_bytes(self.device, nbytes) == read_buffer_bytes(self.device, MAX_BUFFER_BYTES):
            memory_read_gbps(self.device, nbytes)

    def _check_room(self, source: str, revision: str | None, dtype: str) -> int | None:
        """Refuse, before loading, a model whose weights alone exceed the memory the device has available; the
        bytes its weights need, where known."""
        count = parameter_count(source, revision=revision, cache_dir=self.cache_dir)
        if count is None:
            return None
        if self.device.startswith("cuda"):
            available: int | None = torch.cuda.mem_get_info(self.device)[0]
        else:
            available = available_memory_bytes()
        needed = count * resolve_dtype(dtype).itemsize
        if available is None or needed <= available:
            return needed
        held = ", ".join(f"{key[0]} ({key[2]})" for key in self._models) or "nothing yet"
        raise UnrunnableCase(
            f"{source} in {dtype} needs {needed / 1e9:.1f} GB for its {count / 1e6:.0f}M weights, and {self.device} "
            f"has {available / 1e9:.1f} GB available (this run holds {held}); nothing more was loaded. Drop what "
            "the run holds at once: fewer dtypes (--specbench-dtype; bfloat16 holds half of float32's bytes) or "
            "fewer pairs (--specbench-pairs)"
        )

    def load_smaller_dtypes_first(self, needs: Iterable[tuple[PairSpec, str]]) -> None:
        """Load the targets and drafters of ``needs`` (pair, dtype), the dtypes of fewer bytes first: a load that
        converts, and a drafter derived in another dtype, hold a copy for a while, which then comes before the larger
        models are held, not beside them. What cannot load is left for the case's own preparation to report."""
        needs = list(dict.fromkeys((pair, dtype) for pair, dtype in needs))
        for pair, dtype in sorted(needs, key=lambda need: resolve_dtype(need[1]).itemsize):
            try:
                self.target(pair, dtype)
                self.drafter(pair, dtype)
            except Exception:  # noqa: BLE001 - reported by the case that needs it, in its words
                continue

    def release(self, needed: Iterable[tuple[PairSpec, str]]) -> None:
        """Free the models, drafters and kernel forms that no (pair, dtype) in ``needed`` uses: a dtype's models
        after its last block. A later case that needs one loads it again."""
        needed = list(needed)
        names = {(pair.name, dtype) for pair, dtype in needed}
        sources = set()
        for pair, dtype in needed:
            sources.add((pair.target, pair.revision, dtype))
            if pair.draft is not None:
                sources.add((pair.draft, None, dtype))
        dropped_models = [key for key in self._models if key[:3] not in sources]
        dropped_drafters = [key for key in self._drafters if key not in names]
        if not dropped_models and not dropped_drafters:
            return
        for key in dropped_models:
            del self._models[key]
        for key in dropped_drafters:
            del self._drafters[key]
        kept = {id(model) for model in self._held_models()}
        self._kernel_forms = {key: forms for key, forms in self._kernel_forms.items() if key[0] in kept}
        gc.collect()

    def target(self, pair: PairSpec, dtype: str | None = None) -> LoadedModel:
        return self.model(pair.target, pair.revision, self.pair_dtype(pair, dtype))

    def kernel_forms(self, loaded: LoadedModel | torch.nn.Module, kernel: str) -> KernelForms:
        """The kernel forms of a model this store holds (a target, a draft model, or a drafter's model derived from
        the target) under ``kernel`` (``--specbench-kernels``): one object per model and setting, kept with the model
        for the session, so that what the cost probe settles (measure/costs.py, before any timed run) serves every
        case of that model, and no other model's."""
        model = loaded.model if isinstance(loaded, LoadedModel) else loaded
        key = (id(model), kernel)
        forms = self._kernel_forms.get(key)
        if forms is None or forms.model is not model:
            forms = self._kernel_forms[key] = KernelForms(model, kernel)
        return forms

    def draft_kernel_forms(self, drafter: Drafter, kernel: str) -> KernelForms | None:
        """The forms of the drafter's model under ``kernel`` (:meth:`kernel_forms`: the target's own object where the
        draft is the target), or None without a model."""
        return None if drafter.model is None else self.kernel_forms(drafter.model, kernel)

    def drafter(self, pair: PairSpec, dtype: str | None = None) -> Drafter:
        """The pair's drafter in ``dtype`` (see :meth:`pair_dtype`); a drafter derived from the target (int8,
        truncated) is derived from the target in that dtype. For a draft model, its tokenizer is checked against
        the target's first, unless the pair is marked ``cross_tokenizer`` (its drafts cross as text)."""
        key = (pair.name, self.pair_dtype(pair, dtype))
        if key not in self._drafters:
            self._drafters[key] = self._build_drafter(pair, key[1])
            self._note_held()
        return self._drafters[key]

    def _build_drafter(self, pair: PairSpec, dtype: str) -> Drafter:
        kind = kind_of(pair)
        draft = self.model(pair.draft, None, dtype) if kind.draft_model else None  # the revision is the target's
        return kind.build(pair, self.target(pair, dtype), draft)

    def vocabulary_overlap(self, pair: PairSpec, dtype: str | None = None) -> float | None:
        """A cross-tokenizer pair's share of the target's token texts that the draft's vocabulary holds too,
        computed once per pair; None for any other pair (its draft shares the target's tokens)."""
        if not pair.cross_tokenizer:
            return None
        from ..models.tokenization import vocabulary_overlap

        if pair.name not in self._overlaps:  # the tokenizers are the same in every dtype
            dtype = self.pair_dtype(pair, dtype)
            target, draft = self.target(pair, dtype), self.model(pair.draft, None, dtype)
            self._overlaps[pair.name] = vocabulary_overlap(target.tokenizer, draft.tokenizer)
        return self._overlaps[pair.name]

    def reference(
        self,
        key: tuple,
        pair: PairSpec,
        input_ids: torch.Tensor,
        max_new_tokens: int,
        eos_token_id: int | None,
        dtype: str | None = None,
    ) -> list[int]:
        """The target's ``generate(do_sample=False)`` tokens in ``dtype``, under ``key`` (a case's: Case.key), shared
        by every k of a prompt."""
        if key not in self._references:
            target = self.target(pair, self.pair_dtype(pair, dtype))
            self._references[key] = reference_tokens(target.model, input_ids, max_new_tokens, eos_token_id)
        return self._references[key]
