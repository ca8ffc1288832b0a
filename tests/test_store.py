"""ModelStore: a draft that does not fit its target fails its cases with the reason; what no later case needs is
freed; a model larger than the memory available is refused before it loads."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
from factory import write_tiny_pair

from pytest_specbench.cases.pairs import PairSpec
from pytest_specbench.measure import store as store_module
from pytest_specbench.measure.store import ModelStore
from pytest_specbench.models.base import UnrunnableCase
from pytest_specbench.models.loading import parameter_count


@pytest.fixture(scope="module")
def wide_draft_pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pair ``tiny`` whose draft has 300 token ids and the same byte tokenizer as its 257-id target."""
    return write_tiny_pair(tmp_path_factory.mktemp("wide_draft"), draft_config={"vocab_size": 300})


@pytest.mark.slow
def test_a_draft_vocabulary_larger_than_the_targets_fails_naming_both(
    fails_plainly, wide_draft_pairs_file: Path
) -> None:
    result = fails_plainly(wide_draft_pairs_file, "k4 and natural")
    result.stdout.fnmatch_lines(
        [
            "*draft '*draft' has vocab_size 300, more than target '*target' with 257: the draft could propose ids "
            "257 to 299, which the target has no embedding for; pair the target with a draft whose vocab_size is "
            "at most 257",
        ]
    )


@pytest.fixture(scope="module")
def tiny_pair_spec(tmp_path_factory: pytest.TempPathFactory) -> PairSpec:
    folder = write_tiny_pair(tmp_path_factory.mktemp("store_pair")).parent
    return PairSpec("tiny", str(folder / "target"), str(folder / "draft"))


def test_a_dtypes_models_are_freed_when_no_later_case_needs_them_and_one_tokenizer_serves_every_dtype(
    tiny_pair_spec: PairSpec,
) -> None:
    store = ModelStore("cpu")
    single, half = store.target(tiny_pair_spec, "float32"), store.target(tiny_pair_spec, "bfloat16")
    store.drafter(tiny_pair_spec, "float32"), store.drafter(tiny_pair_spec, "bfloat16")
    assert single.tokenizer is half.tokenizer
    assert store.weights_held_peak_bytes > 0
    freed = weakref.ref(single.model)
    store.release([(tiny_pair_spec, "bfloat16")])
    del single
    gc.collect()
    assert freed() is None  # nothing else holds the float32 target
    assert store.target(tiny_pair_spec, "bfloat16") is half  # the dtype still needed stays
    store.target(tiny_pair_spec, "float32")  # needed again: loaded again
    assert store.load_counts[f"{tiny_pair_spec.target} (float32)"] == 2
    assert store.load_counts[f"{tiny_pair_spec.target} (bfloat16)"] == 1


def test_a_model_larger_than_the_memory_available_is_refused_before_it_loads(
    tiny_pair_spec: PairSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = parameter_count(tiny_pair_spec.target)
    assert count == sum(parameter.numel() for parameter in ModelStore("cpu").target(tiny_pair_spec).model.parameters())
    monkeypatch.setattr(store_module, "available_memory_bytes", lambda: count * 4 - 1)  # a byte short in float32

    def loaded(*args, **kwargs):
        raise AssertionError("loaded a model the memory cannot hold")

    monkeypatch.setattr(store_module, "load_model", loaded)
    with pytest.raises(UnrunnableCase, match=r"target in float32 needs .* GB .* available .*--specbench-dtype"):
        ModelStore("cpu").target(tiny_pair_spec, "float32")
    monkeypatch.setattr(store_module, "available_memory_bytes", lambda: count * 4)
    with pytest.raises(AssertionError, match="loaded a model"):  # it fits: the load goes ahead
        ModelStore("cpu").target(tiny_pair_spec, "float32")


def test_the_memory_read_is_timed_before_a_model_at_the_buffers_cap_loads_and_not_for_a_smaller_one(
    tiny_pair_spec: PairSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_specbench.kernels import bandwidth

    events: list[str] = []
    load = store_module.load_model
    monkeypatch.setattr(store_module, "memory_read_gbps", lambda device, nbytes: events.append(f"read {nbytes}"))
    monkeypatch.setattr(store_module, "load_model", lambda *a, **k: events.append("load") or load(*a, **k))
    ModelStore("cpu").target(tiny_pair_spec, "float32")
    assert events == ["load"]  # its weights are below the cap: the probe reads their own size, later
    monkeypatch.setattr(bandwidth, "MAX_BUFFER_BYTES", 1 << 20)  # the cap is the smallest buffer: any model reaches it
    monkeypatch.setattr(store_module, "MAX_BUFFER_BYTES", 1 << 20)
    events.clear()
    ModelStore("cpu").target(tiny_pair_spec, "float32")
    assert events == [f"read {parameter_count(tiny_pair_spec.target) * 4}", "load"]
