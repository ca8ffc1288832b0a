"""The default matrix on a machine whose Hugging Face cache holds every built-in GPT-2 model.

On a CPU the default run stays within its budget: the embedded pairs and gpt2_distil, never the larger GPT-2
pairs, which run when named or on a GPU; the run says which it left out and how to ask for them, and a pair
nobody named is judged by the local cache alone (the default run downloads nothing). The stand-ins are tiny
GPT-2 models saved under the hub ids in a temporary cache.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from factory import hub_snapshot, save_checkpoint, word_gpt2, word_tokenizer
from huggingface_hub import constants as hub_constants

from pytest_specbench.cases.pairs import BUILTIN_PAIRS, all_pairs, default_pair_names
from pytest_specbench.models import loading
from pytest_specbench.plugin import activation
from pytest_specbench.plugin.availability import PairAvailability
from pytest_specbench.plugin.session_inputs import build_session
from pytest_specbench.settings.config import parse_settings

#: the hub ids the built-in GPT-2 pairs load
GPT2_MODELS = ("gpt2", "distilgpt2", "gpt2-medium", "gpt2-large")
CPU_DEFAULT = {"gpt2_distil", "gemma3_int8", "gemma3_pld"}
LEFT_OUT = "gpt2_tiny, gpt2_medium, gpt2_large"


@pytest.fixture(scope="module")
def gpt2_hub_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A hub cache holding a tiny GPT-2 stand-in under each hub id of the built-in GPT-2 pairs."""
    hub = tmp_path_factory.mktemp("gpt2-hub-cache")
    model, tokenizer = word_gpt2(), word_tokenizer()
    for repo_id in GPT2_MODELS:
        save_checkpoint(model, tokenizer, hub_snapshot(hub, repo_id))
    return hub


@pytest.fixture
def on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin's runs take the CPU defaults, on a machine with a GPU too."""
    monkeypatch.setattr(activation, "cuda_available", lambda: False)


def _use_hub_cache(monkeypatch: pytest.MonkeyPatch, hub: Path) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _collected(result: pytest.RunResult) -> list[str]:
    ids = re.findall(r"test_speculative_decoding\[([^\]]+)\]", result.stdout.str())
    assert ids, result.stdout.str()
    return ids


def _pairs_of(ids: list[str]) -> set[str]:
    return {case_id.split("-k")[0] for case_id in ids}


# float32 alone: the dtype axis (the default, auto, adds bfloat16 on some CPUs) is not what these tests are about
COLLECT = ("--collect-only", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "--specbench-dtype=float32")
NO_CASE = ("-k", "no_such_case", "-p", "no:randomly", "-p", "no:cacheprovider", "--benchmark-disable")


# --- which pairs the default selects -------------------------------------------------------------


def test_the_cpu_default_leaves_out_the_larger_gpt2_pairs_and_a_gpu_keeps_every_one(tmp_path: Path) -> None:
    defined = all_pairs(tmp_path, None)
    selected, left_out = default_pair_names(defined, on_gpu=False)
    assert set(selected) == CPU_DEFAULT and ", ".join(left_out) == LEFT_OUT
    assert default_pair_names(defined, on_gpu=True) == (tuple(BUILTIN_PAIRS), ())


def test_a_pair_declared_under_a_left_out_name_is_the_users_and_runs_by_default(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.specbench.pairs.gpt2_large]\ntarget = "a"\ndraft = "b"\n')
    selected, left_out = default_pair_names(all_pairs(tmp_path, None), on_gpu=False)
    assert "gpt2_large" in selected and "gpt2_large" not in left_out


def test_the_session_selects_by_device_unless_pairs_are_named(tmp_path: Path) -> None:
    def pair_names(settings: dict, gpu_here: bool) -> list[str]:
        float32 = {"dtype": ("float32", "--specbench-dtype")}  # auto would probe a GPU this machine may lack
        config = parse_settings({**float32, **settings}, cuda_available=lambda: gpu_here)
        return [pair.name for pair in build_session(config, tmp_path, controller=False).pairs]

    assert set(pair_names({}, gpu_here=False)) == CPU_DEFAULT
    assert pair_names({}, gpu_here=True) == list(BUILTIN_PAIRS)
    assert pair_names({"gpu": ("cuda:0", "--specbench-gpu")}, gpu_here=False) == list(BUILTIN_PAIRS)
    assert set(pair_names({"gpu": ("cpu", "--specbench-gpu")}, gpu_here=True)) == CPU_DEFAULT
    named = {"pairs": ("gpt2_medium,gpt2_large", "--specbench-pairs")}
    assert pair_names(named, gpu_here=False) == ["gpt2_medium", "gpt2_large"]


# --- nothing downloads ---------------------------------------------------------------------------


def test_a_built_in_pair_nobody_named_is_judged_by_the_local_cache_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hub answers, the cache is empty: only a pair the user named may download its models.
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(loading, "_hub_reachable", lambda endpoint, timeout=0: True)
    defined = all_pairs(tmp_path, None)
    unnamed = PairAvailability(parse_settings({}), defined)
    reason = unnamed.unavailable_reason(defined["gpt2_distil"])
    assert reason is not None and "not in the local Hugging Face cache" in reason and "hf download gpt2" in reason
    named = PairAvailability(parse_settings({"pairs": ("gpt2_distil", "--specbench-pairs")}), defined)
    assert named.unavailable_reason(defined["gpt2_distil"]) is None


# --- through the plugin, with tiny stand-ins in the hub cache --------------------------------------


@pytest.mark.slow  # pytester collections of the whole default matrix: seconds
def test_the_cpu_default_collects_the_same_cases_with_every_gpt2_model_cached(
    bench, gpt2_hub_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_cpu: None
) -> None:
    _use_hub_cache(monkeypatch, gpt2_hub_cache)
    cached = _collected(bench(*COLLECT, defaults=False))
    assert _pairs_of(cached) == CPU_DEFAULT
    assert len(cached) == 60  # 3 pairs x 5 k x 4 prompt categories: 20 more than the embedded pairs alone
    _use_hub_cache(monkeypatch, tmp_path / "empty-hub-cache")
    assert _collected(bench(*COLLECT, defaults=False)) == cached  # the same matrix: gpt2_distil skips at run time


@pytest.mark.slow  # pytester runs of the default matrix (no case selected, no model loads)
def test_the_cpu_default_says_which_pairs_it_left_out_and_how_to_ask(
    bench, gpt2_hub_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_cpu: None
) -> None:
    # The embedded pairs are ready only where the embedded extra is installed (the test extra alone: not).
    embedded = ", gemma3_int8, gemma3_pld" if loading.model_available("embedded:gemma3-270m") is None else ""
    _use_hub_cache(monkeypatch, gpt2_hub_cache)
    result = bench(*NO_CASE, defaults=False)
    result.stdout.fnmatch_lines(
        [
            "*specbench summary*",
            f"*and the pairs gpt2_distil{embedded} ready to run*",
            f"left out of the CPU default: {LEFT_OUT}; run them with "
            "--specbench-pairs=gpt2_tiny,gpt2_medium,gpt2_large, or on a GPU (--specbench-gpu=cuda)",
        ]
    )
    _use_hub_cache(monkeypatch, tmp_path / "empty-hub-cache")
    result = bench(*NO_CASE, defaults=False)
    result.stdout.fnmatch_lines(
        [
            *(["*and the pairs gemma3_int8, gemma3_pld ready to run"] if embedded else []),
            "*gpt2_distil: model 'gpt2' is not in the local Hugging Face cache*",
            f"left out of the CPU default: {LEFT_OUT}; *",
        ]
    )
    named = bench(*NO_CASE, "--specbench-pairs=gemma3_pld", defaults=False)
    assert "left out of the CPU default" not in named.stdout.str()


@pytest.mark.slow  # pytester collections: seconds
def test_the_large_gpt2_pairs_run_when_named(
    bench, gpt2_hub_cache: Path, monkeypatch: pytest.MonkeyPatch, on_cpu: None
) -> None:
    _use_hub_cache(monkeypatch, gpt2_hub_cache)
    ids = _collected(bench(*COLLECT, "--specbench-pairs=gpt2_medium,gpt2_large,gpt2_tiny", defaults=False))
    assert _pairs_of(ids) == {"gpt2_medium", "gpt2_large", "gpt2_tiny"} and len(ids) == 60
