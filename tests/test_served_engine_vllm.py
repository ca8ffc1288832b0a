"""The vllm engine through the plugin, against real vLLM servers on a tiny Llama: the vLLM lane (docs/served.md).

Skipped, with the reason, where no vLLM environment exists. Each server takes about a minute to start on 2 cores.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from factory import VLLM_LANE, VLLM_PYTHON, served_llama

pytest.importorskip("prometheus_client")

pytestmark = VLLM_LANE

#: loaded into a vLLM server's processes (PYTHONPATH): its rejection sampler is handed target logits whose best token
#: is each draft token, so it commits every draft it was given, unverified
LOSSY_SITECUSTOMIZE = """
import importlib.abc
import importlib.util
import sys

NAME = "vllm.v1.sample.rejection_sampler"


def _patch(module):
    honest = module.rejection_sample

    def lossy(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, target_logits,
              *args, **kwargs):
        logits = target_logits.clone()
        rows = (draft_token_ids >= 0).nonzero().squeeze(-1)
        if rows.numel():
            logits[rows, draft_token_ids[rows].long()] = logits.max() + 100.0
        return honest(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, logits,
                      *args, **kwargs)

    module.rejection_sample = lossy


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != NAME:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Hook())
"""

#: the plugin's runs start their speculative servers with the lossy sampler above
LOSSY_CONFTEST = """
import dataclasses

import pytest_specbench.measure.vllm_engine as served_case

honest = served_case.server_spec


def lossy(*args, **kwargs):
    spec = honest(*args, **kwargs)
    return dataclasses.replace(spec, env=(("PYTHONPATH", {folder!r}),))


def pytest_configure(config):
    served_case.server_spec = lossy


def pytest_unconfigure(config):
    served_case.server_spec = honest
"""


@pytest.fixture(scope="module")
def served_pairs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("served_pair")
    served_llama(root / "llama")
    pairs = root / "pairs.toml"
    pairs.write_text(f'[pairs.tiny]\ntarget = "{root}/llama"\ndrafter = "prompt_lookup"\n', encoding="utf-8")
    return pairs


def _run(bench, pairs: Path, *args: str):
    return bench(
        "--specbench-engine=native,vllm",
        f"--specbench-vllm-python={VLLM_PYTHON}",
        "--specbench-max-new-tokens=24",
        "--specbench-min-rounds=2",
        "--specbench-max-rounds=2",
        "--specbench-json=results.json",
        *args,
        pairs_file=pairs,
        prompts="repetitive,code_python",
    )


def test_prompt_lookup_runs_on_vllm_beside_the_native_engine_lossless_and_counted(bench, pytester, served_pairs):
    result = _run(bench, served_pairs, "--specbench-k=2,4", "-rs")
    result.assert_outcomes(passed=8)
    rows = json.loads((pytester.path / "results.json").read_text())["results"]
    served = [row for row in rows if row["engine"] == "vllm"]
    assert len(served) == 4
    for row in served:
        assert row["verdict"] == "lossless", row
        assert row["server"].startswith("vllm") and '"method": "ngram"' in row["server"]
        assert row["server"].split(": ", 1)[1].startswith(f"--model {row['target']} --dtype float32")  # its source
        assert f'"num_speculative_tokens": {row["k"]}' in row["server"]
        assert row["new_tokens"] == sum(row["accepted_per_step"]) + row["target_forward_passes"]
        assert row["pairing"] == "own-baseline" and "served engine" in row["pairing_reason"]
        assert row["predicted_speedup"] is None  # the cost probe times this package's passes, not the server's
        assert row["inputs_fingerprint"]["server"]
    # One block per k holds both prompts: each ran the block's rounds.
    assert {row["block"] for row in served} == {row["block"] for row in served if row["k"] == 2} | {
        row["block"] for row in served if row["k"] == 4
    }
    assert len({row["block"] for row in served}) == 2


def test_a_server_that_commits_unverified_drafts_is_caught(bench, pytester, served_pairs):
    planted = pytester.mkdir("planted")
    (planted / "sitecustomize.py").write_text(LOSSY_SITECUSTOMIZE, encoding="utf-8")
    pytester.makeconftest(LOSSY_CONFTEST.format(folder=str(planted)))
    result = _run(bench, served_pairs, "--specbench-k=4", "--specbench-engine=vllm")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*speculative output differs from the target's greedy output*"])


def _processes_naming(text: str) -> list[str]:
    """The command lines of this machine's processes that hold ``text``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in line:
            found.append(line)
    return found


@pytest.mark.slow  # a module mark is not what tests/test_lanes.py reads
def test_a_signal_during_a_block_keeps_the_finished_block_and_stops_every_server(bench_process, pytester, served_pairs):
    model = str(served_pairs.parent / "llama")
    process = bench_process(
        "--specbench-engine=vllm",
        f"--specbench-vllm-python={VLLM_PYTHON}",
        f"--specbench-pairs-file={served_pairs}",
        "--specbench-k=2,4",
        "--specbench-max-new-tokens=24",
        "--specbench-min-rounds=2",
        "--specbench-max-rounds=2",
        prompts="repetitive,code_python",
    )
    log = pytester.path / "spec_results.jsonl"
    output = pytester.path / "output.txt"
    deadline = time.monotonic() + 900

    def wait_for(condition) -> None:
        while not condition():
            assert process.poll() is None and time.monotonic() < deadline, output.read_text()
            time.sleep(0.5)

    # The k=2 block has run both prompts, and the k=4 block's server is starting: a signal mid-block.
    wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= 3)
    wait_for(lambda: _processes_naming('"num_speculative_tokens": 4'))
    process.send_signal(signal.SIGTERM)
    assert process.wait(120) == pytest.ExitCode.INTERRUPTED
    document = json.loads((pytester.path / "spec_results.json").read_text())
    assert sorted(row["case"] for row in document["results"]) == ["tiny-k2-code_python", "tiny-k2-repetitive"]
    assert not _processes_naming(f"--model {model}")  # no server outlives the run


@pytest.mark.slow  # a module mark is not what tests/test_lanes.py reads
def test_endpoints_someone_else_runs_are_measured_and_one_serving_another_k_is_refused(
    bench, pytester, served_pairs, tmp_path
):
    from pytest_specbench.served.vllm_server import ServerSpec, VllmServer

    model = served_pairs.parent / "llama"
    ngram = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    common = dict(python=VLLM_PYTHON, model=model, dtype="float32", max_model_len=512, cpu_kv_cache_gib=1)
    with (
        VllmServer(ServerSpec(**common), tmp_path / "baseline.log") as baseline,
        VllmServer(ServerSpec(**common, speculative=ngram), tmp_path / "k2.log") as k2,
    ):
        endpoints = f"baseline={baseline.url},k2={k2.url},k4={k2.url}"  # k4 names the k=2 server: refused
        result = bench(
            "--specbench-engine=vllm",
            f"--specbench-vllm-endpoints={endpoints}",
            "--specbench-k=2,4",
            "--specbench-max-new-tokens=24",
            "--specbench-min-rounds=2",
            "--specbench-max-rounds=2",
            "--specbench-json=results.json",
            pairs_file=served_pairs,
            prompts="repetitive",
        )
    result.assert_outcomes(passed=1, failed=1)
    refused = f"*the endpoint {k2.url} serves with 2 speculative tokens; the case needs one with k=4*"
    result.stdout.fnmatch_lines([refused])
    (row,) = json.loads((pytester.path / "results.json").read_text())["results"]
    assert row["k"] == 2 and row["verdict"] == "lossless"
    assert row["server"].startswith("vllm") and f"endpoint {k2.url}" in row["server"]
    assert row["new_tokens"] == sum(row["accepted_per_step"]) + row["target_forward_passes"]


@pytest.mark.slow  # a module mark is not what tests/test_lanes.py reads
def test_the_gpu_checks_vllm_part_passes_in_its_cpu_form(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "out"
    command = [sys.executable, "-m", "pytest_specbench", "gpu-check", "--out", str(out), "--device", "cpu"]
    command += ["--only", "engines_vllm", "--vllm-python", str(VLLM_PYTHON)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    check = next(check for check in summary["checks"] if check["name"] == "engines_vllm")
    assert check["status"] == "pass" and "cases lossless" in check["summary"], check
    assert {row["engine"] for row in check["details"]["rows"]} == {"native", "vllm"}
