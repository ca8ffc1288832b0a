"""Shared fixtures: the tiny pairs on disk and a runner of the shipped benchmark module through pytester.

The helper module ``factory`` is importable because ``pythonpath = ["tests"]``
in pyproject.toml. Runs inside pytester (xdist workers included) never import
it: the pairs are written here, in the parent process, and passed by path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from factory import NEW_TOKENS, REPETITIVE_PROMPT, hf_generate, word_gpt2, write_tiny_pair
from transformers import GPT2LMHeadModel

BENCH_MODULE = Path(__file__).resolve().parents[1] / "bench_cases" / "test_speculative.py"


# --- the plugin through pytester ---------------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pairs TOML defining pair ``tiny``: a byte-level GPT-2 and a draft that agrees with it often."""
    return write_tiny_pair(tmp_path_factory.mktemp("tiny_pair"), name="tiny", noise=0.01)


@pytest.fixture(scope="session")
def weak_pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same pair id ``tiny`` and target with a much worse draft: a regression for the gate."""
    return write_tiny_pair(tmp_path_factory.mktemp("weak_pair"), name="tiny", noise=0.2)


@pytest.fixture
def bench(pytester: pytest.Pytester, tiny_pairs_file: Path) -> Callable[..., pytest.RunResult]:
    """Run the shipped benchmark module in pytester on pair ``tiny``, with small, fast settings.

    ``bench(*args, pairs_file=..., prompts=..., benchmark=False, defaults=True)``:
    ``args`` come last and win; ``defaults=False`` leaves out the tiny-run options
    (for ini tests). pytest-benchmark is disabled unless ``benchmark`` is true or
    an ``args`` item is a ``--benchmark*`` option.
    """
    pytester.makepyfile(test_speculative=BENCH_MODULE.read_text(encoding="utf-8"))

    def run(
        *args: str,
        pairs_file: Path = tiny_pairs_file,
        prompts: str = "natural,code_json",
        benchmark: bool = False,
        defaults: bool = True,
    ) -> pytest.RunResult:
        tiny_run = [
            f"--specbench-pairs-file={pairs_file}", "--specbench-pairs=tiny", f"--specbench-prompts={prompts}",
            "--specbench-k=1,4", "--specbench-max-new-tokens=12", "--specbench-warmup=0", "--specbench-min-rounds=1", "--specbench-max-rounds=1",
            "-p", "no:cacheprovider", "-p", "no:randomly",
        ]  # fmt: skip
        if not benchmark and not any(arg.startswith("--benchmark") for arg in args):
            tiny_run.append("--benchmark-disable")
        return pytester.runpytest(*(tiny_run if defaults else []), *args)

    return run


@pytest.fixture
def six_case_bench(bench) -> Callable[..., pytest.RunResult]:
    """:func:`bench` with three prompts (six cases) and pytest-benchmark left on, as in a plain run.

    (pytest-xdist switches pytest-benchmark off on its workers.)
    """
    return functools.partial(bench, prompts="natural,code_json,dialogue", benchmark=True)


# --- the drafter tests' target ------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpt2_target() -> GPT2LMHeadModel:
    """The drafter tests' target: :func:`factory.word_gpt2`."""
    return word_gpt2()


@pytest.fixture(scope="module")
def repetitive_prompt() -> torch.Tensor:
    """:data:`factory.REPETITIVE_PROMPT` as a batch of one."""
    return torch.tensor([REPETITIVE_PROMPT])


@pytest.fixture(scope="module")
def gpt2_reference(gpt2_target, repetitive_prompt) -> torch.Tensor:
    """The prompt and :data:`factory.NEW_TOKENS` greedy tokens of ``generate()``, EOS ignored."""
    new = hf_generate(gpt2_target, repetitive_prompt, NEW_TOKENS)
    return torch.tensor([REPETITIVE_PROMPT + new])
