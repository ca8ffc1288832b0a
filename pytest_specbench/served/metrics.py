"""A server's speculative-decoding counters from its Prometheus /metrics, read before and after a timed run: vLLM's
(``vllm:spec_decode_*``) and llama.cpp's (``llamacpp:spec_decode_*``, the same names) alike."""

from __future__ import annotations

from dataclasses import dataclass

from .client import read_url

PREFIX = "vllm:spec_decode_"
#: llama-server's (with --metrics)
LLAMACPP_PREFIX = "llamacpp:spec_decode_"


@dataclass(frozen=True)
class SpecCounters:
    """The counters summed over the server's engines: verify steps that drafted, drafted and accepted tokens, and
    the accepted tokens at each draft position."""

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_position: tuple[float, ...]

    def __sub__(self, before: SpecCounters) -> SpecCounters:
        width = max(len(self.accepted_per_position), len(before.accepted_per_position))
        pad = lambda values: (*values, *([0.0] * (width - len(values))))  # noqa: E731
        return SpecCounters(
            self.drafts - before.drafts,
            self.draft_tokens - before.draft_tokens,
            self.accepted_tokens - before.accepted_tokens,
            tuple(a - b for a, b in zip(pad(self.accepted_per_position), pad(before.accepted_per_position))),
        )

    @property
    def acceptance(self) -> float:
        """Accepted over drafted tokens."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else float("nan")

    @property
    def tau(self) -> float:
        """Tokens committed per verify step that drafted: the accepted ones and the target's own."""
        return 1 + self.accepted_tokens / self.drafts if self.drafts else float("nan")


def parse_spec_counters(text: str, prefix: str = PREFIX) -> SpecCounters | None:
    """The counters in a /metrics page; None where it has none (a server without speculation)."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {}
    per_position: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(prefix):
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            name = sample.name[len(prefix) : -len("_total")]
            if name == "num_accepted_tokens_per_pos":
                position = int(sample.labels["position"])
                per_position[position] = per_position.get(position, 0.0) + sample.value
            else:
                totals[name] = totals.get(name, 0.0) + sample.value
    if "num_drafts" not in totals:
        return None
    return SpecCounters(
        totals["num_drafts"],
        totals.get("num_draft_tokens", 0.0),
        totals.get("num_accepted_tokens", 0.0),
        tuple(per_position.get(position, 0.0) for position in range(max(per_position, default=-1) + 1)),
    )


def read_spec_counters(url: str, timeout_s: float = 30.0, prefix: str = PREFIX) -> SpecCounters | None:
    """The counters of the server at ``url``; :class:`~.client.ServedRequestError` where /metrics cannot be read."""
    return read_url(f"{url}/metrics", lambda text: parse_spec_counters(text, prefix), timeout_s)
