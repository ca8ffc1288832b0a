"""Static caches and compiled one-token steps: lossless against ``generate``, compiled once, refused clearly.

On a CPU the compiled path is traced by torch.compile with a counting backend that runs the
captured graphs eagerly (what inductor would compile, without its minutes of code generation);
one test compiles with inductor for real, and a CUDA test runs CUDA graphs where a GPU exists.
"""

from __future__ import annotations

import functools
import json

import pytest
import torch
from factory import hf_generate, tiny_pair

import pytest_specbench.engine.compiled_steps as compiled_steps
from pytest_specbench import greedy_generate, speculative_generate
from pytest_specbench.engine.cost_probe import draft_token_cost, verify_costs
from pytest_specbench.engine.drafters import ModelDrafter
from pytest_specbench.engine.kv_cache import static_cache
from pytest_specbench.kernels.verify_forms import KernelForms

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPT = [5, 17, 33, 9, 60, 2, 41, 7, 8, 11, 12, 13, 70, 71, 3, 4, 44, 45, 46, 47]
NEW_TOKENS = 29
# The tiny Gemma 3 and Mistral have a sliding window of 8 positions: too short for a static cache here.
FULL_ATTENTION = ("gpt2", "llama", "gpt_neox")


@functools.cache
def pair(arch: str):
    return tiny_pair(arch)


@functools.cache
def reference(arch: str, length: int = len(PROMPT)) -> tuple[int, ...]:
    return tuple(hf_generate(pair(arch)[0], PROMPT[:length], NEW_TOKENS))


class CountingBackend:
    """A torch.compile backend that counts the graphs it is given and runs them as traced."""

    def __init__(self) -> None:
        self.graphs = 0
        self.calls = 0

    def __call__(self, graph: torch.fx.GraphModule, example_inputs):
        self.graphs += 1

        def run(*args):
            self.calls += 1
            return graph.forward(*args)

        return run


def _forget_compiled_steps() -> None:
    for arch in FULL_ATTENTION + ("gemma3",):
        for model in pair(arch):
            vars(model).pop(compiled_steps._ATTRIBUTE, None)
    torch._dynamo.reset()


@pytest.fixture
def backend(monkeypatch) -> CountingBackend:
    counting = CountingBackend()
    monkeypatch.setattr(compiled_steps, "BACKEND", counting)
    _forget_compiled_steps()
    # A recompilation storm must fail the test, not fall back to eager steps quietly.
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        yield counting
    _forget_compiled_steps()


@pytest.mark.slow
@pytest.mark.parametrize("arch", FULL_ATTENTION)
def test_compiled_steps_are_lossless(arch, backend):
    target, draft = pair(arch)
    expected = list(reference(arch))
    for k in (1, 4, 8):
        result = speculative_generate(target, draft, PROMPT, k, NEW_TOKENS, compile_steps=True)
        assert result.token_ids == expected, f"k={k}"
        assert result.stats.accepted_tokens > 0
    assert greedy_generate(target, PROMPT, NEW_TOKENS, compile_steps=True).token_ids == expected
    assert backend.graphs > 0 and backend.calls > 0  # the one-token steps did go through torch.compile


@pytest.mark.slow
def test_a_model_drafting_for_itself_keeps_two_caches(backend):
    target, _ = pair("gpt2")
    result = speculative_generate(target, target, PROMPT, 4, NEW_TOKENS, compile_steps=True)
    assert result.token_ids == list(reference("gpt2"))
    assert result.stats.accepted_tokens == result.stats.drafted_tokens  # the draft is the target
    with torch.inference_mode():  # the caches hold inference tensors now
        assert static_cache(target, 64, "target") is not static_cache(target, 64, "draft")


@pytest.mark.slow
def test_later_runs_reuse_the_graphs_and_the_cache(backend):
    target, draft = pair("llama")
    # One forms object, settled once, as a session keeps per model: "auto" by name settles afresh each call,
    # by timing, and a one-row form that flips between calls is a new graph.
    # The draft model's too: forms of its own, kept with it as a session's store keeps them.
    forms, draft_forms = KernelForms(target), KernelForms(draft)
    run = dict(compile_steps=True, kernels=forms, draft_kernels=draft_forms)
    speculative_generate(target, draft, PROMPT, 4, NEW_TOKENS, **run)
    greedy_generate(target, PROMPT, NEW_TOKENS, compile_steps=True, kernels=forms)
    graphs, calls = backend.graphs, backend.calls
    for k in (2, 8):
        speculative_generate(target, draft, PROMPT, k, NEW_TOKENS, **run)
    assert greedy_generate(target, PROMPT[:12], NEW_TOKENS, compile_steps=True, kernels=forms).token_ids == list(
        reference("llama", 12)
    )
    assert backend.graphs == graphs  # same static shapes and forms: nothing recompiled
    assert backend.calls > calls + NEW_TOKENS  # and the compiled graphs did run
    with torch.inference_mode():
        assert static_cache(target, 40) is static_cache(target, 100)  # both within one 128-position block


@pytest.mark.parametrize("arch", ["gemma3", "mistral"])
def test_a_model_with_sliding_window_layers_is_refused(arch, backend):
    target, draft = pair(arch)
    with pytest.raises(ValueError, match="compiled steps need a model without sliding-window layers; this one has"):
        speculative_generate(target, draft, PROMPT, 4, NEW_TOKENS, compile_steps=True)
    with pytest.raises(ValueError, match="leave --specbench-compile"):
        greedy_generate(target, PROMPT, NEW_TOKENS, compile_steps=True)
    assert backend.graphs == 0


@pytest.mark.slow
def test_a_broken_rollback_is_caught(backend, monkeypatch):
    import pytest_specbench.engine.decoding as decoding

    target, draft = pair("gpt2")
    monkeypatch.setattr(decoding, "crop_to", lambda cache, length: None)  # planted bug: stale states stay
    result = speculative_generate(target, draft, PROMPT, 4, NEW_TOKENS, compile_steps=True)
    assert result.token_ids != list(reference("gpt2"))


@pytest.mark.slow
def test_the_cost_probes_run_on_the_compiled_path(backend):
    target, draft = pair("gpt2")
    ids = torch.tensor([PROMPT])
    length = len(PROMPT) + NEW_TOKENS  # the run's static cache size
    assert min(verify_costs(target, ids, 5, repeats=1, compile_length=length)) > 0
    calls = backend.calls
    assert draft_token_cost(ModelDrafter(draft), ids, repeats=2, compile_length=length) > 0
    assert backend.calls > calls


@pytest.mark.slow
def test_inductor_compiles_the_step_on_this_machine():
    _forget_compiled_steps()
    target, draft = pair("gpt2")
    try:
        result = speculative_generate(target, draft, PROMPT, 4, NEW_TOKENS, compile_steps=True)
    finally:
        _forget_compiled_steps()
    assert result.token_ids == list(reference("gpt2"))


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graphs_are_lossless_on_a_gpu():
    torch._dynamo.reset()
    target, draft = (model.to("cuda") for model in tiny_pair("llama"))
    expected = hf_generate(target, PROMPT, NEW_TOKENS)
    for k in (1, 4):
        assert speculative_generate(target, draft, PROMPT, k, NEW_TOKENS, compile_steps=True).token_ids == expected
    assert greedy_generate(target, PROMPT, NEW_TOKENS, compile_steps=True).token_ids == expected


# --- through the plugin ----------------------------------------------------------------------


@pytest.mark.slow
def test_the_compile_option_runs_lossless_cases(bench, pytester, backend):
    result = bench(
        "--specbench-compile", "--specbench-k=1,4", "--specbench-prompts=natural", "--specbench-json=results.json"
    )
    result.assert_outcomes(passed=2)
    rows = json.loads((pytester.path / "results.json").read_text())["results"]
    assert [row["verdict"] for row in rows] == ["lossless", "lossless"]
    assert all(row["baseline_matches_reference"] for row in rows)
    assert backend.calls > 0


@pytest.mark.slow
def test_a_compiled_run_records_that_its_blocks_ran_rounds_and_why(bench, pytester, backend):
    from pytest_specbench.measure.pairing import COMPILED_STEPS

    result = bench("--specbench-compile", "--specbench-k=4", "--specbench-prompts=natural", "--specbench-json=out.json")
    result.assert_outcomes(passed=1)
    rows = json.loads((pytester.path / "out.json").read_text())["results"]
    assert [(row["pairing"], row["pairing_reason"]) for row in rows] == [("rounds", COMPILED_STEPS)]
