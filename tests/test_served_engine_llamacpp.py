"""The llamacpp engine through the plugin, against real llama-servers on the embedded Gemma 3 270M GGUF file as it
ships (Q4_K_M): the llama.cpp lane (docs/served.md).

Skipped, with the reason, where no llama-server exists (scripts/make-llamacpp.sh builds one) or the embedded model
is not installed. A server starts in about a second on 2 cores.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from factory import LLAMACPP_LANE, LLAMACPP_SERVER

from pytest_specbench.models.loading import gguf_file, model_available

pytest.importorskip("prometheus_client")

pytestmark = [
    *LLAMACPP_LANE,
    pytest.mark.skipif(
        model_available("embedded:gemma3-270m") is not None, reason="the embedded Gemma 3 270M is not installed"
    ),
]

PAIRS = '[pairs.tiny]\ntarget = "embedded:gemma3-270m"\ndrafter = "prompt_lookup"\n'


@pytest.fixture(scope="module")
def gemma_pld(tmp_path_factory) -> Path:
    pairs = tmp_path_factory.mktemp("llamacpp_pair") / "pairs.toml"
    pairs.write_text(PAIRS, encoding="utf-8")
    return pairs


def _run(bench, pairs: Path, *args: str, prompts: str = "repetitive,code_python"):
    return bench(
        "--specbench-engine=native,llamacpp",
        f"--specbench-llamacpp-server={LLAMACPP_SERVER}",
        "--specbench-max-new-tokens=24",
        "--specbench-min-rounds=2",
        "--specbench-max-rounds=2",
        "--specbench-json=results.json",
        *args,
        pairs_file=pairs,
        prompts=prompts,
    )


def test_prompt_lookup_runs_on_llama_server_beside_the_native_engine_lossless_and_counted(bench, pytester, gemma_pld):
    result = _run(bench, gemma_pld, "--specbench-k=2,4", "-rs")
    result.assert_outcomes(passed=6, skipped=2)  # k=2 below the n-gram of 3: ngram-simple would draft nothing
    result.stdout.fnmatch_lines(["*proposes nothing where its draft length M (k=2) is below its n-gram N*"])
    rows = json.loads((pytester.path / "results.json").read_text())["results"]
    served = [row for row in rows if row["engine"] == "llamacpp"]
    assert len(served) == 2
    for row in served:
        assert row["verdict"] == "lossless", row
        assert row["server"].startswith("llama.cpp") and "--spec-type ngram-simple" in row["server"]
        assert f"--spec-ngram-simple-size-m {row['k']}" in row["server"]
        assert "-m embedded:gemma3-270m" in row["server"] and "GGUF Q4_K_M as shipped" in row["server"]
        # the counters' steps: every token a step's accepted draft or its target token
        assert row["new_tokens"] == sum(row["accepted_per_step"]) + row["target_forward_passes"]
        assert row["pairing"] == "own-baseline" and row["predicted_speedup"] is None
        assert row["inputs_fingerprint"]["server"]
    assert all(sum(row["drafted_per_step"]) > 0 and row["acceptance_rate"] > 0 for row in served)
    assert len({row["block"] for row in served}) == 1  # one server per k, both prompts in its block
    result.stdout.fnmatch_lines(["*engines side by side*", "*llamacpp / native*"])


def _pids_naming(*texts: str) -> list[int]:
    """This machine's processes whose command lines hold every one of ``texts``."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if all(text in line for text in texts):
                pids.append(int(cmdline.parent.name))
        except OSError:
            continue
    return pids


@pytest.mark.slow  # a module mark is not what tests/test_lanes.py reads
def test_a_server_killed_mid_block_fails_its_case_naming_its_log_and_no_server_outlives_the_run(
    bench_process, pytester, gemma_pld
):
    import os

    models = pytester.path / "models"  # this run's own: another test's server may run beside it
    process = bench_process(
        "--specbench-engine=llamacpp",
        f"--specbench-cache-dir={models}",
        f"--specbench-llamacpp-server={LLAMACPP_SERVER}",
        f"--specbench-pairs-file={gemma_pld}",
        "--specbench-k=4",
        "--specbench-max-new-tokens=24",
        "--specbench-min-rounds=6",
        "--specbench-max-rounds=6",
        prompts="repetitive,code_python",
    )
    output = pytester.path / "output.txt"
    deadline = time.monotonic() + 600
    marker = ("--spec-ngram-simple-size-m 4", str(models))  # this run's speculative server
    while not _pids_naming(*marker):
        assert process.poll() is None and time.monotonic() < deadline, output.read_text()
        time.sleep(0.2)
    time.sleep(3)  # started, and answering the block's first requests
    for pid in _pids_naming(*marker):
        os.kill(pid, signal.SIGKILL)
    process.wait(300)
    text = output.read_text()
    assert "the llama.cpp server for" in text and "exited with status -9" in text and "its log:" in text, text
    assert not _pids_naming(str(models))  # no server outlives the run


@pytest.mark.slow  # a module mark is not what tests/test_lanes.py reads
def test_endpoints_someone_else_runs_are_measured_and_a_baseline_that_speculates_is_refused(
    bench, pytester, gemma_pld, tmp_path
):
    from pytest_specbench.served.llamacpp_server import LlamaServer, LlamaServerSpec

    model = gguf_file("embedded:gemma3-270m")
    ngram = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "4")
    with (
        LlamaServer(LlamaServerSpec(LLAMACPP_SERVER, model, 2), tmp_path / "baseline.log") as baseline,
        LlamaServer(LlamaServerSpec(LLAMACPP_SERVER, model, 2, ngram), tmp_path / "k4.log") as k4,
    ):
        result = bench(
            "--specbench-engine=llamacpp",
            f"--specbench-llamacpp-endpoints=baseline={baseline.url},k4={k4.url}",
            "--specbench-k=4",
            "--specbench-max-new-tokens=24",
            "--specbench-min-rounds=2",
            "--specbench-max-rounds=2",
            "--specbench-json=results.json",
            pairs_file=gemma_pld,
            prompts="repetitive",
        )
        result.assert_outcomes(passed=1)
        (row,) = json.loads((pytester.path / "results.json").read_text())["results"]
        assert row["verdict"] == "lossless" and f"endpoint {k4.url}" in row["server"]
        assert row["new_tokens"] == sum(row["accepted_per_step"]) + row["target_forward_passes"]
        swapped = bench(
            "--specbench-engine=llamacpp",
            f"--specbench-llamacpp-endpoints=baseline={k4.url},k4={k4.url}",
            "--specbench-k=4",
            pairs_file=gemma_pld,
            prompts="repetitive",
        )
        # an endpoint named for another k than it drafts: its counters show its own draft length
        misnamed = bench(
            "--specbench-engine=llamacpp",
            f"--specbench-llamacpp-endpoints=baseline={baseline.url},k8={k4.url}",
            "--specbench-k=8",
            pairs_file=gemma_pld,
            prompts="repetitive",
        )
    swapped.assert_outcomes(failed=1)
    swapped.stdout.fnmatch_lines([f"*the endpoint {k4.url} serves with speculation; the case needs one without*"])
    misnamed.assert_outcomes(failed=1)
    misnamed.stdout.fnmatch_lines(["*the server drafts up to 4 tokens a step*where the case's k is 8*"])
