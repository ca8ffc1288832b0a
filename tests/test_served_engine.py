"""The vllm engine without a server: what it refuses before any model loads, how a case maps to vLLM's speculative
config, how a served request becomes a result, its blocks and their rounds, and its options.

The engine against real vLLM servers is in tests/test_served_engine_vllm.py (the vLLM lane)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pytest_specbench.cases.matrix import Case, build_matrix
from pytest_specbench.cases.pairs import PairSpec
from pytest_specbench.cases.prompts import Prompt
from pytest_specbench.engine.stats import DecodeStats, GenerationResult
from pytest_specbench.measure import served_case, vllm_engine
from pytest_specbench.measure.blocks import OwnBaselineRounds, TimedCase, time_block
from pytest_specbench.measure.engines import ENGINES
from pytest_specbench.measure.pairing import OWN_BASELINE, Pairing
from pytest_specbench.measure.served_steps import served_result
from pytest_specbench.measure.vllm_engine import (
    ServerSettings,
    baseline_spec,
    server_arguments,
    server_spec,
    speculative_config,
)
from pytest_specbench.served.client import ServedRequestError, ServedRun
from pytest_specbench.served.metrics import SpecCounters
from pytest_specbench.served.vllm_server import ServerSpec
from pytest_specbench.settings.config import ConfigError, parse_settings

PLD = PairSpec("pld", "./m", drafter="prompt_lookup", drafter_options=(("ngram_size", 2),))
DRAFT = PairSpec("draft", "./m", "./d")
NATURAL, CODE = Prompt("natural-01", "natural", "text"), Prompt("code-01", "code", "def f():")


def _case(pair: PairSpec, k: int | str = 4, prompt: Prompt = NATURAL, engine: str = "vllm", **fields) -> Case:
    return Case(pair, k, prompt, prompt.category, engine=engine, **fields)


def test_a_case_maps_to_vllms_speculative_config():
    assert speculative_config(_case(PLD, 4), None) == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_max": 2,
        "prompt_lookup_min": 1,
    }
    assert speculative_config(_case(DRAFT, 8), Path("/models/d")) == {
        "method": "draft_model",
        "model": "/models/d",
        "num_speculative_tokens": 8,
    }


@pytest.mark.parametrize("engine", ["vllm", "llamacpp"])
@pytest.mark.parametrize(
    ("case", "temperature", "reason"),
    [
        ((PairSpec("q", "./m", drafter="int8"),), 0.0, "{engine} has no method for an int8"),
        ((PairSpec("t", "./m", drafter="truncated"),), 0.0, "{engine} has no method for the target's first layers"),
        ((PairSpec("x", "./m", "./d", cross_tokenizer=True),), 0.0, "{engine} has no method for a draft model with"),
        ((PLD, "auto"), 0.0, "no draft-length schedule"),
        ((PLD, 4, NATURAL, {"batch": 4}), 0.0, "the {engine} engine runs one request at a time"),
        ((PLD,), 0.7, "the {engine} engine runs greedy decoding only"),
        ((PLD, 4, Prompt("mt-1", "writing", "a", later_turns=("b",), conversation=True)), 0.0, "turns"),
        (
            (PairSpec("p", "./m", drafter="prompt_lookup", drafter_options=(("max_proposal", 2),)),),
            0.0,
            "no counterpart of max_proposal",
        ),
    ],
    ids=["int8", "truncated", "cross-tokenizer", "schedule", "batch", "sampling", "turns", "max_proposal"],
)
def test_what_a_served_engine_cannot_run_is_refused_with_the_reason_before_any_model_loads(
    engine, case, temperature, reason
):
    *arguments, fields = case if isinstance(case[-1], dict) else (*case, {})
    refused = _case(*arguments, engine=engine, **fields)
    assert reason.format(engine=engine) in (ENGINES[engine].refusal(refused, temperature=temperature) or "")
    assert ENGINES[engine].refusal(_case(PLD, engine=engine)) is None


@pytest.mark.parametrize(
    ("case", "endpoints", "reason"),
    [
        (_case(PairSpec("q", "./m", drafter="int8")), (), "vllm has no method for an int8"),
        (_case(PairSpec("t", "./m", drafter="truncated")), (), "vllm has no method for the target's first layers"),
        (_case(PLD, "auto"), (), "no draft-length schedule"),
        # with endpoints: the engine's reason, not "names no endpoint for k=auto"
        (_case(PLD, "auto"), (("baseline", "http://a:1"), ("k4", "http://a:2")), "no draft-length schedule"),
    ],
)
def test_a_case_vllm_cannot_run_is_skipped_before_any_server_starts(monkeypatch, case, endpoints, reason):
    from types import SimpleNamespace

    from pytest_specbench.models.base import NotApplicable

    def no_servers(*args):
        raise AssertionError("a server was started or connected to for a case the engine refuses")

    monkeypatch.setattr(vllm_engine.VllmServing, "servers", no_servers)
    context = SimpleNamespace(
        config=SimpleNamespace(temperature=0.0, dtypes=("float32",), vllm_endpoints=endpoints), store=None
    )
    with pytest.raises(NotApplicable, match=reason):
        served_case.ServedSequenceRun(case, context)


def test_a_prompt_lookup_or_draft_model_case_runs():
    assert ENGINES["vllm"].refusal(_case(PLD)) is None
    assert ENGINES["vllm"].refusal(_case(DRAFT)) is None


def test_a_served_block_holds_every_prompt_of_one_configuration():
    """One server per (target, dtype, pair, k): the prompts share it; another k is another block."""
    assert _case(PLD, 4, NATURAL).block == _case(PLD, 4, CODE).block
    assert _case(PLD, 4).block != _case(PLD, 8).block
    assert _case(PLD, 4, dtype="bfloat16").block != _case(PLD, 4).block
    native = Case(PLD, 4, NATURAL, "natural")
    assert native.block != Case(PLD, 4, CODE, "code").block  # the native engine's blocks stay per prompt


def test_a_served_blocks_cases_run_back_to_back_after_the_targets_other_cases():
    cases = build_matrix([PLD], [2, 4], [NATURAL, CODE], engines=("native", "vllm"))
    assert [case.id for case in cases] == [
        "pld-native-k2-natural",
        "pld-native-k4-natural",
        "pld-native-k2-code",
        "pld-native-k4-code",
        "pld-vllm-k2-natural",
        "pld-vllm-k2-code",
        "pld-vllm-k4-natural",
        "pld-vllm-k4-code",
    ]
    blocks = [case.block for case in cases]
    for block in set(blocks):  # each block's cases are contiguous
        at = [position for position, other in enumerate(blocks) if other == block]
        assert at == list(range(at[0], at[-1] + 1)), block
    assert len(set(blocks)) == 4


def _run(tokens: int = 32) -> ServedRun:
    return ServedRun(list(range(tokens)), [0.05 + 0.01 * i for i in range(tokens)], 0.5)


def test_a_request_is_a_result_whose_steps_account_for_every_token():
    # 7 drafting steps of 4 accepted would commit 1 + 35 tokens: the counters count the last step's drafts past
    # the 32 asked for, and those come off the last step.
    result = served_result([1, 2, 3], _run(), SpecCounters(7, 28, 28, (7, 7, 7, 7)))
    stats = result.stats
    assert result.token_ids == list(range(32)) and result.prompt_length == 3
    assert stats.new_tokens == 32 == sum(stats.accepted_per_step) + stats.target_forward_passes
    assert stats.accepted_per_step == [0, 4, 4, 4, 4, 4, 4, 0]
    assert stats.prefill_time_s == pytest.approx(0.05) and stats.wall_time_s == 0.5
    # Per position 4, 3, 1, 1 of 5 drafts: one accepted none, one 1, two 2, one all 4; the rest did not draft.
    mixed = served_result([1], _run(), SpecCounters(5, 20, 9, (4, 3, 1, 1))).stats
    assert sorted(a for a, d in zip(mixed.accepted_per_step, mixed.drafted_per_step) if d) == [0, 1, 2, 2, 4]
    assert mixed.new_tokens == sum(mixed.accepted_per_step) + mixed.target_forward_passes
    assert mixed.acceptance_rate == pytest.approx(9 / 20)
    plain = served_result([1], _run(), None).stats  # the baseline: one token per step
    assert plain.target_forward_passes == 32 and plain.tokens_per_step == 1.0


def test_proposals_shorter_than_k_give_steps_that_drafted_at_least_what_they_accepted():
    # k = 8, 3 drafts of 21 tokens: vLLM's n-gram proposals were shorter than 8 where the match ran out.
    stats = served_result([1], _run(), SpecCounters(3, 21, 12, (2, 2, 2, 2, 1, 1, 1, 1))).stats
    steps = list(zip(stats.drafted_per_step, stats.accepted_per_step))[1:4]
    assert sorted(a for _, a in steps) == [0, 4, 8]
    assert all(a <= d <= 8 for d, a in steps) and sum(d for d, _ in steps) == 21
    assert stats.k_per_step[1:4] == [8, 8, 8]


def test_counters_that_moved_more_than_one_request_can_are_an_error():
    """Another client's requests on the same server move the counters too: the steps cannot be told."""
    with pytest.raises(ValueError, match="counters moved by more than this request"):
        served_result([1], _run(8), SpecCounters(10, 40, 40, (10, 10, 10, 10)))


def test_a_served_row_names_its_models_by_source_not_by_this_machines_folders(tmp_path):
    spec = ServerSpec(
        tmp_path / "python",
        tmp_path / "cache" / "entry",
        "bfloat16",
        {"method": "draft_model", "model": str(tmp_path / "cache" / "draft"), "num_speculative_tokens": 4},
        ("--tensor-parallel-size", "2"),
        max_model_len=4096,
    )
    text = server_arguments(_case(DRAFT), spec)
    assert str(tmp_path) not in text
    assert text == (
        '--model ./m --dtype bfloat16 --max-model-len 4096 --speculative-config {"method": "draft_model", '
        '"model": "./d", "num_speculative_tokens": 4} --tensor-parallel-size 2'
    )


GPU_SHARE = ("--gpu-memory-utilization", str(vllm_engine.GPU_MEMORY_UTILIZATION))


@pytest.mark.parametrize(
    "device, args, environ, extra, env, cpu_kv",
    [
        ("cpu", (), {}, (), (), vllm_engine.CPU_KV_CACHE_GIB),
        ("cpu", (), {"VLLM_CPU_KVCACHE_SPACE": "4"}, (), (), None),
        ("cuda:1", (), {}, GPU_SHARE, (("CUDA_VISIBLE_DEVICES", "1"),), None),
        ("cuda:0", (), {"CUDA_VISIBLE_DEVICES": "2,3"}, GPU_SHARE, (), None),
        ("cuda:0", ("-tp", "2"), {}, ("-tp", "2", *GPU_SHARE), (), None),
        (
            "cuda:0",
            ("--gpu-memory-utilization=0.7",),
            {},
            ("--gpu-memory-utilization=0.7",),
            (("CUDA_VISIBLE_DEVICES", "0"),),
            None,
        ),
    ],
)
def test_a_gpu_servers_memory_share_and_device_follow_the_run_unless_the_user_names_them(
    device, args, environ, extra, env, cpu_kv, tmp_path, monkeypatch
):
    # The baseline server runs beside each speculative one: vLLM's default share (0.9) would leave the second none.
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(vllm_engine, "model_folder", lambda source, **_: tmp_path / source)
    settings = ServerSettings(tmp_path / "python", "bfloat16", args, None, device)
    for spec in (server_spec(_case(PLD), settings), baseline_spec(_case(PLD), settings)):
        assert (spec.extra_args, spec.env, spec.cpu_kv_cache_gib) == (extra, env, cpu_kv)
        command = spec.command(8000)
        assert command[len(command) - len(extra) :] == list(extra)


def test_a_context_length_given_with_an_equals_sign_is_the_users(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_engine, "model_folder", lambda source, **_: tmp_path / source)
    given = ServerSettings(tmp_path / "python", "bfloat16", ("--max-model-len=2048",), None)
    assert baseline_spec(_case(PLD), given).max_model_len is None
    default = ServerSettings(tmp_path / "python", "bfloat16", (), None)
    assert baseline_spec(_case(PLD), default).max_model_len == vllm_engine.DEFAULT_MAX_MODEL_LEN


def _result(seconds: float) -> GenerationResult:
    stats = DecodeStats(new_tokens=4, wall_time_s=seconds, prefill_time_s=0.0)
    return GenerationResult(torch.zeros(1, 5, dtype=torch.long), 1, stats)


def test_each_case_of_a_served_block_pairs_with_its_own_prompts_baseline():
    config = parse_settings({}, lambda: False)
    calls: list[str] = []

    def runner(name: str, seconds: float):
        return lambda *args, **kwargs: calls.append(name) or _result(seconds)

    cases = [
        TimedCase(_case(PLD, 4, prompt), runner(prompt.id, 1.0), baseline=runner(f"base {prompt.id}", 2.0 + i))
        for i, prompt in enumerate((NATURAL, CODE))
    ]
    block = time_block(cases, None, config, None, pairing=Pairing(OWN_BASELINE))
    assert isinstance(block.strategy, OwnBaselineRounds) and block.rounds == config.min_rounds
    assert calls[:4] == ["base natural-01", "natural-01", "base code-01", "code-01"]
    assert calls[4:8] == ["base code-01", "code-01", "base natural-01", "natural-01"]  # the order rotates
    for timed, seconds in zip(cases, (2.0, 3.0)):
        assert [run.stats.wall_time_s for run in timed.paired_baselines] == [seconds] * block.rounds


def test_the_vllm_engine_needs_vllms_interpreter_before_any_model_loads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPECBENCH_VLLM_PYTHON", raising=False)
    with pytest.raises(ConfigError, match=r"needs vLLM's own environment.*scripts/make-vllm-env.sh"):
        parse_settings({"engine": ("native,vllm", "--specbench-engine")})
    monkeypatch.setenv("SPECBENCH_VLLM_PYTHON", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match=r"\$SPECBENCH_VLLM_PYTHON \(.*nowhere\) is no executable"):
        parse_settings({"engine": ("vllm", "--specbench-engine")})
    with pytest.raises(ConfigError, match="is not an executable file"):
        parse_settings(
            {"engine": ("vllm", "--specbench-engine"), "vllm-python": (str(tmp_path), "--specbench-vllm-python")}
        )
    with pytest.raises(ConfigError, match=r"--specbench-vllm-python=/bin/false: /bin/false has no vLLM: exit status 1"):
        parse_settings(
            {"engine": ("vllm", "--specbench-engine"), "vllm-python": ("/bin/false", "--specbench-vllm-python")}
        )
    python = tmp_path / ".venv-vllm" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")  # runs, says nothing: no vLLM
    python.chmod(0o755)
    monkeypatch.delenv("SPECBENCH_VLLM_PYTHON")
    with pytest.raises(ConfigError, match="has no vLLM: exit status 0, no output"):
        parse_settings({"engine": ("vllm", "--specbench-engine")})
    python.write_text("#!/bin/sh\necho vllm 0.0.0\n")  # answers the version query as vLLM's interpreter does
    config = parse_settings(
        {"engine": ("vllm", "--specbench-engine"), "vllm-args": ("--tensor-parallel-size 8", "--specbench-vllm-args")}
    )
    assert config.vllm_python == python and config.vllm_args == ("--tensor-parallel-size", "8")
    assert parse_settings({}).vllm_python is None  # the option changes nothing unless the engine runs


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("k4=http://node:8001", "needs a baseline and at least one k<K>"),
        ("baseline=http://node:8000", "needs a baseline and at least one k<K>"),
        ("baseline=http://node:8000,kfour=http://node:8001", "'kfour=http://node:8001' is no NAME=URL"),
        ("baseline=node:8000,k4=http://node:8001", "'node:8000' \\(baseline\\) is no server URL"),
        ("baseline=http://node:99999,k4=http://node:8001", "'http://node:99999' \\(baseline\\) is no server URL.*PORT"),
        ("baseline=http://node:0,k4=http://node:8001", "'http://node:0' \\(baseline\\) is no server URL"),
        ("baseline=http://a:1,k4=http://a:2,k4=http://a:3", "a name is given twice"),
    ],
)
def test_an_endpoint_list_that_is_no_list_of_servers_is_a_usage_error_naming_what_is_accepted(value, message):
    given = {"engine": ("vllm", "--specbench-engine"), "vllm-endpoints": (value, "--specbench-vllm-endpoints")}
    with pytest.raises(ConfigError, match=message):
        parse_settings(given)


def test_endpoints_need_the_vllm_engine_and_no_interpreter(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no .venv-vllm here
    monkeypatch.delenv("SPECBENCH_VLLM_PYTHON", raising=False)
    endpoints = ("baseline=http://node:8000/,k4=https://node:8001/v", "--specbench-vllm-endpoints")
    with pytest.raises(ConfigError, match="names servers for the vllm engine, which this run does not run"):
        parse_settings({"vllm-endpoints": endpoints})
    config = parse_settings({"engine": ("vllm", "--specbench-engine"), "vllm-endpoints": endpoints})
    assert config.vllm_endpoints == (("baseline", "http://node:8000"), ("k4", "https://node:8001/v"))
    assert config.vllm_python is None
    with pytest.raises(ConfigError, match="--specbench-vllm-args set up servers this run starts"):
        parse_settings(
            {
                "engine": ("vllm", "--specbench-engine"),
                "vllm-endpoints": endpoints,
                "vllm-args": ("--tensor-parallel-size 8", "--specbench-vllm-args"),
            }
        )


def test_an_endpoint_that_does_not_answer_is_an_error_naming_its_url():
    import socket

    from pytest_specbench.served.client import ServedRequestError
    from pytest_specbench.served.endpoint import connect

    with socket.socket() as closed:  # a port nothing listens on once this socket closes
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(ServedRequestError, match=f"http://127.0.0.1:{port}/v1/models could not be read"):
        connect(f"http://127.0.0.1:{port}")


def test_an_endpoint_serving_another_model_or_another_k_is_refused():
    from pytest_specbench.served.endpoint import Endpoint, EndpointMismatch

    endpoint = Endpoint("http://node:8001", "Qwen2.5-Coder-1.5B", "/models/qwen2.5-coder-1.5b", "vllm 0.32.0", 4)
    endpoint.check_serves("embedded:qwen2.5-coder-1.5b", 4)
    endpoint.check_serves("Qwen/Qwen2.5-Coder-1.5B", 4)
    with pytest.raises(EndpointMismatch, match="serves Qwen2.5-Coder-1.5B .*not the case's target gpt2-large"):
        endpoint.check_serves("gpt2-large", 4)
    with pytest.raises(EndpointMismatch, match="weights folder is 'qwen2.5-coder-1.5b-instruct'"):
        endpoint.check_serves("Qwen/Qwen2.5-Coder-1.5B-Instruct", 4)  # a name the served one begins with
    larger = Endpoint("http://node:8000", "gpt2-xl", "/models/gpt2-xl", "vllm 0.32.0", None)
    with pytest.raises(EndpointMismatch, match="not the case's target gpt2;"):
        larger.check_serves("gpt2", None)  # a name that begins the served one
    with pytest.raises(EndpointMismatch, match="serves with 4 speculative tokens; the case needs one with k=8"):
        endpoint.check_serves("embedded:qwen2.5-coder-1.5b", 8)
    with pytest.raises(EndpointMismatch, match="needs one without speculation"):
        endpoint.check_serves("embedded:qwen2.5-coder-1.5b", None)


def test_a_failed_request_names_the_servers_log_wherever_it_is_naming_server_log():
    # The baseline's reference request too: vLLM's own error only says to look at the server's log.
    class Server:
        failure_note = "the server's log: vllm-0.log"
        alive_checks: list[str] = []

        def check_alive(self, when: str = "") -> None:
            self.alive_checks.append(when)

    def failing():
        raise ServedRequestError("http://127.0.0.1:1 reported an error mid-stream: EngineCore encountered an issue")

    server = Server()
    with pytest.raises(ServedRequestError, match="EngineCore encountered an issue\nthe server's log: vllm-0.log"):
        served_case._naming_server_log(server, failing)
    assert server.alive_checks == ["during a request"]
    assert served_case._naming_server_log(server, lambda: 7) == 7


def test_the_pool_keeps_at_most_a_baseline_and_a_speculative_server(tmp_path, monkeypatch):
    # Each GPU server takes a share of the memory: a second target's baseline must not start beside the first's.
    from pytest_specbench.served import pool as pool_module

    live: list[ServerSpec] = []

    class FakeServer:
        def __init__(self, spec, log_path):
            self.spec = spec

        def start(self):
            live.append(self.spec)

        def stop(self):
            live.remove(self.spec)

        def check_alive(self, when=""):
            assert self.spec in live

    from pytest_specbench.served import vllm_server

    monkeypatch.setattr(vllm_server, "VllmServer", FakeServer)
    servers = pool_module.ServerPool(tmp_path)

    def spec(model: str, k: int | None) -> ServerSpec:
        config = None if k is None else {"method": "ngram", "num_speculative_tokens": k}
        return ServerSpec(tmp_path / "python", tmp_path / model, "bfloat16", config)

    for model in ("a", "b"):
        for k in (2, 4):
            servers.server(spec(model, None))
            servers.server(spec(model, k))
            assert live == [spec(model, None), spec(model, k)]
    servers.server(spec("b", None))  # running: reused, nothing stopped
    assert live == [spec("b", None), spec("b", 4)]
    servers.stop_all()
    assert live == []


@pytest.mark.slow
def test_an_endpoint_that_does_not_answer_fails_its_case_naming_its_url_without_a_traceback(bench):
    import socket

    with socket.socket() as closed:  # a port nothing listens on once this socket closes
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    result = bench(
        "-k", "k1 and natural", "--specbench-engine=vllm", f"--specbench-vllm-endpoints=baseline={url},k1={url}"
    )
    result.assert_outcomes(failed=1, deselected=3)
    out = result.stdout.str()
    assert f"{url}/v1/models could not be read" in out
    assert "Traceback" not in out and "direct cause" not in out and "During handling" not in out


def test_every_kind_a_served_engine_runs_declares_its_server_config():
    # The engine's method for a kind carries its mapping: no method's name is compared where the server starts.
    methods = [method for engine in ENGINES.values() if engine.served for method in engine.methods.values()]
    assert methods and all(method.server_config is not None for method in methods)
