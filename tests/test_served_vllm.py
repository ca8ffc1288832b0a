"""The served layer against real vLLM servers on tiny models: the vLLM lane (docs/served.md).

Skipped, with the reason, where no vLLM environment exists: ``SPECBENCH_VLLM_PYTHON`` names its interpreter, or
``.venv-vllm/bin/python`` (scripts/make-vllm-env.sh) is used. Each server takes about 100 s to start on 2 cores.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from factory import VLLM_LANE, VLLM_PYTHON, served_llama

pytest.importorskip("prometheus_client")

from pytest_specbench.served.client import ServedRequestError, stream_completion  # noqa: E402
from pytest_specbench.served.endpoint import EndpointMismatch, connect  # noqa: E402
from pytest_specbench.served.metrics import read_spec_counters  # noqa: E402
from pytest_specbench.served.vllm_server import ServerDied, ServerSpec, VllmServer  # noqa: E402

pytestmark = VLLM_LANE
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 2}
PROMPT = list(b"def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\ndef add(")
NEW = 32


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    return served_llama(tmp_path_factory.mktemp("served") / "llama")


def _spec(folder: Path, speculative: dict | None = None) -> ServerSpec:
    # 1 GiB of KV cache each: left to itself, a CPU server takes most of the memory and the next one is killed
    return ServerSpec(VLLM_PYTHON, folder, "float32", speculative, max_model_len=512, cpu_kv_cache_gib=1)


@pytest.fixture(scope="module")
def baseline(model_folder, tmp_path_factory):
    with VllmServer(_spec(model_folder), tmp_path_factory.mktemp("logs") / "baseline.log") as server:
        yield server


def _generate(folder: Path) -> list[int]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = torch.tensor([PROMPT])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False
    )
    return out[0, len(PROMPT) :].tolist()


def test_ngram_speculation_on_vllm_is_lossless_counted_and_a_server_killed_mid_block_is_named(
    baseline, model_folder, tmp_path
):
    greedy = stream_completion(baseline.url, baseline.spec.served_name, PROMPT, NEW)
    assert read_spec_counters(baseline.url) is None  # the baseline serves no speculation
    # Beside, not a verdict: vLLM's greedy tokens against transformers' generate() on the same weights.
    reference = _generate(model_folder)
    if greedy.token_ids != reference:
        at = next(i for i, (a, b) in enumerate(zip(greedy.token_ids, reference)) if a != b)
        assert greedy.top2_margins[at] is not None and greedy.top2_margins[at] < 0.1, (at, greedy.top2_margins[at])
    log = tmp_path / "ngram.log"
    with VllmServer(_spec(model_folder, NGRAM), log) as server:
        before = read_spec_counters(server.url)
        run = stream_completion(server.url, server.spec.served_name, PROMPT, NEW)
        delta = read_spec_counters(server.url) - before
        assert run.token_ids == greedy.token_ids  # lossless: the speculative server's tokens are the baseline's
        assert delta.drafts >= 1 and delta.accepted_tokens <= delta.draft_tokens <= 4 * delta.drafts
        assert sum(delta.accepted_per_position) == delta.accepted_tokens and len(delta.accepted_per_position) == 4
        assert delta.accepted_tokens + delta.drafts <= NEW  # each drafting step commits its accepted and one more
        os.killpg(server._process.pid, signal.SIGKILL)
        server._process.wait()
        with pytest.raises(ServerDied, match=f"exited with status -9.*its log: {log}"):
            server.check_alive()
        with pytest.raises(ServedRequestError, match=server.url):
            stream_completion(server.url, server.spec.served_name, PROMPT, NEW, timeout_s=10)


def test_a_wrong_endpoint_is_refused_before_it_is_measured(baseline):
    endpoint = connect(baseline.url)
    assert endpoint.served_name == "llama" and endpoint.k is None and endpoint.version.startswith("vllm 0.")
    endpoint.check_serves(str(baseline.spec.model), None)
    with pytest.raises(EndpointMismatch, match=f"the endpoint {baseline.url} serves llama .*not the case's target"):
        endpoint.check_serves("embedded:gemma3-270m", None)
    with pytest.raises(EndpointMismatch, match="serves without speculation; the case needs one with k=4"):
        endpoint.check_serves(str(baseline.spec.model), 4)


def test_a_server_that_cannot_start_is_an_error_naming_its_log(tmp_path):
    log = tmp_path / "missing.log"
    with pytest.raises(ServerDied, match=f"exited with status .* while starting; its log: {log}"):
        VllmServer(_spec(tmp_path / "no_such_model"), log, startup_timeout_s=300).start()
    with pytest.raises(ServerDied, match="no vLLM interpreter at"):
        VllmServer(ServerSpec(tmp_path / "python", tmp_path, "float32"), log).start()
