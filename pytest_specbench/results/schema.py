"""The one schema of a result row: every field named once, with its type and meaning.

A case's result is a :class:`CaseResult` and travels as ``CaseResult.to_row()``, a dict of built-in types that
pytest-xdist, JSON and CSV take as it is. The CSV columns, the summary table, the gate's fields and
pytest-benchmark's ``extra_info`` all derive from here, so a field added here appears in each. A field's metadata
(all optional but ``meaning``): ``group`` (case identity, timing, acceptance, verdict or environment); ``csv`` (a
CSV column; lists and nested values are JSON only); ``seed`` (position among the leading CSV columns); ``summary``
(``(header, format)`` of its terminal column); ``interval`` (the row also has ``<name>_ci_low``/``_ci_high``);
``gate`` (``"compared"``: saved in a baseline and checked, ``"info"``: saved only); ``extra_info`` (copied into
pytest-benchmark's ``extra_info``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..engine.cost_model import CURVE_FLOOR, PROBE_TRIES
from ..settings.engines import OWN_LOOP_ENGINE, engines_in_words

IDENTITY, TIMING, ACCEPTANCE, VERDICT, ENVIRONMENT = "case identity", "timing", "acceptance", "verdict", "environment"
COST_MODEL, MEMORY = "cost model", "memory and size"


def _field(
    meaning: str,
    group: str,
    *,
    default: Any = dataclasses.MISSING,
    csv: bool = True,
    seed: int | None = None,
    summary: tuple[str, str] | None = None,
    interval: bool = False,
    gate: str | None = None,
    extra_info: bool = False,
) -> Any:
    metadata = {
        "meaning": meaning,
        "group": group,
        "csv": csv,
        "seed": seed,
        "summary": summary,
        "interval": interval,
        "gate": gate,
        "extra_info": extra_info,
    }
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(kw_only=True)
class CaseResult:
    """One finished benchmark case."""

    # --- case identity
    case: str = _field(
        "case id, {pair}-k{k}-{prompt}; {pair}-{engine}-k{k}-{prompt} when more than one engine "
        "ran; -b{batch} after k{k} when more than one batch size ran",
        IDENTITY,
    )
    config: str = _field(
        "the first seed's config name, {pair}_k{k} (_{engine} for hf, _b{batch} at batch > 1)", IDENTITY, seed=1
    )
    pair: str = _field("model pair id", IDENTITY, gate="compared", extra_info=True)
    target: str = _field("target model source", IDENTITY)
    draft: str = _field("what drafts, in words", IDENTITY)
    drafter: str = _field("drafter kind: model, truncated, int8 or prompt_lookup", IDENTITY)
    engine: str = _field(
        f"decoding engine: {engines_in_words()}",
        IDENTITY,
        default=OWN_LOOP_ENGINE,
        summary=("engine", ""),
        extra_info=True,
    )
    server: str = _field(
        "a served engine: its distribution and version, and the arguments its speculative server started "
        "with (the baseline server: the same without --speculative-config); empty for the others",
        IDENTITY,
        default="",
    )
    served_vs_generate: int | None = _field(
        "a served engine: the first new token at which the baseline server's greedy output differs from the "
        "target's generate() on the same weights (None: the same tokens); beside the verdict, not part of it",
        IDENTITY,
        default=None,
    )
    k: int | str = _field(
        "draft tokens per step, or the schedule that chose them at each step: auto (native: "
        "the cost model's choice; hf: transformers' default) or heuristic (transformers' "
        "+2/-1 schedule)",
        IDENTITY,
        summary=("k", ""),
        gate="compared",
        extra_info=True,
    )
    prompt: str = _field(
        "prompt label in the case id (category, or prompt id)",
        IDENTITY,
        summary=("prompt", ""),
        gate="compared",
        extra_info=True,
    )
    prompt_id: str = _field("prompt id in the prompt file", IDENTITY)
    batch: int = _field(
        "batch size: prompts decoded at once (the prompt and others of its category, left padded); "
        "at batch > 1 every speed, speedup and count is the whole batch's, against the target's "
        "batched greedy decoding; the case id gains -b{batch} when more than one batch size ran",
        IDENTITY,
        default=1,
        summary=("batch", ""),
        extra_info=True,
    )
    batch_prompt_ids: list = _field(
        "the prompt id of each row of the batch, the case's own first (batch > 1)", IDENTITY, default=[], csv=False
    )
    batch_prompt_tokens: list = _field(
        "each row's prompt length in tokens before padding (batch > 1; prompt_tokens is the first row's)",
        IDENTITY,
        default=[],
        csv=False,
    )
    batch_new_tokens: list = _field(
        "each row's new tokens (batch > 1; new_tokens is the first row's, the batch's total is their sum)",
        IDENTITY,
        default=[],
        csv=False,
    )
    temperature: float = _field("sampling temperature (0: greedy decoding)", IDENTITY, default=0.0)
    top_p: float = _field("top-p of the sampling (1: off)", IDENTITY, default=1.0)
    top_k: int = _field("top-k of the sampling (0: off)", IDENTITY, default=0)
    category: str = _field("prompt category", IDENTITY)
    prompt_tokens: int = _field("prompt length in tokens (a multi-turn prompt: its turns' inputs summed)", IDENTITY)
    new_tokens: int = _field("tokens generated per run (batch > 1: by the case's own row)", IDENTITY)
    turns: list = _field(
        "a multi-turn prompt, per turn: its input and new tokens, tau, acceptance, median decode milliseconds per "
        "token of the runs and of the baselines, and its verdict (empty for one turn; the row's figures sum the turns)",
        IDENTITY,
        default=[],
        csv=False,
    )
    inputs_fingerprint: dict = _field(
        "what the case measured from, a digest per part: target, draft "
        "(the models' files, or hub id and revision), drafter (its "
        "settings), prompt (its text), case (engine, k, batch, dtype); "
        "--specbench-resume replays a logged row only when every part is "
        "the same now",
        IDENTITY,
        default={},
        csv=False,
    )

    # --- timing
    latency_ms: float = _field("milliseconds per generated token of the speculative run (median run)", TIMING, seed=2)
    throughput_tps: float = _field("speculative tokens per second (median), the seed's name", TIMING, seed=3)
    baseline_decode_tps: float = _field(
        "target-only greedy decoding speed: tokens after the first over the time after the first (median)",
        TIMING,
        summary=("base tok/s", ".1f"),
    )
    decode_tps: float = _field(
        "speculative decoding speed, prefill excluded (median)", TIMING, summary=("spec tok/s", ".1f")
    )
    decode_speedup: float = _field(
        "decoding speedup, prefill excluded: geometric mean of the per-round ratios of time per decoded token",
        TIMING,
        summary=("decode speedup", ".2f"),
        interval=True,
        gate="info",
        extra_info=True,
    )
    decode_speedup_ci_low: float | None = _field(
        "95% interval of decode_speedup, low end (null when no spread is known: one round alone)", TIMING, default=None
    )
    decode_speedup_ci_high: float | None = _field("95% interval of decode_speedup, high end", TIMING, default=None)
    speedup: float = _field(
        "end-to-end speedup, prefill included: geometric mean of the per-round wall-time ratios",
        TIMING,
        summary=("e2e speedup", ".2f"),
        gate="info",
        extra_info=True,
    )
    speedup_ci_low: float | None = _field(
        "95% interval of speedup, low end (null when no spread is known: one round alone)", TIMING, default=None
    )
    speedup_ci_high: float | None = _field("95% interval of speedup, high end", TIMING, default=None)
    ttft_ms: float = _field("speculative time to first token: the prefill of target and draft (median)", TIMING)
    baseline_ttft_ms: float = _field("target-only time to first token (median)", TIMING)
    prefill_tokens: int = _field(
        "tokens the prefill step commits: 1 for native; for hf, whose first target "
        "pass also verifies a draft block, 1 + what it accepted",
        TIMING,
        default=1,
    )
    baseline_tps: float = _field(
        "target-only tokens per second, prefill included (median)", TIMING, gate="info", extra_info=True
    )
    speculative_tps: float = _field(
        "speculative tokens per second, prefill included (median)", TIMING, gate="info", extra_info=True
    )
    baseline_tps_min: float = _field("slowest baseline run, tokens per second", TIMING)
    baseline_tps_max: float = _field("fastest baseline run, tokens per second", TIMING)
    speculative_tps_min: float = _field("slowest speculative run, tokens per second", TIMING)
    speculative_tps_max: float = _field("fastest speculative run, tokens per second", TIMING)
    baseline_cv: float | None = _field("coefficient of variation of the baseline's wall times", TIMING, default=None)
    speculative_cv: float | None = _field(
        "coefficient of variation of the speculative wall times", TIMING, default=None
    )
    rounds: int = _field("timed speculative runs (rounds)", TIMING)
    baseline_runs: int = _field(
        "baselines its speedups compare with: one per round, each interpolated between the "
        "baseline runs around its run (all of the block's baseline runs under "
        "--specbench-baseline-once)",
        TIMING,
    )
    interval_dof: int | None = _field(
        "degrees of freedom of the decode interval's t quantile: the block's "
        "cases' rounds pooled (null for an unpaired interval)",
        TIMING,
        default=None,
    )
    round_log_sd: float | None = _field(
        "per-round standard deviation of the log decode ratio, pooled over the "
        "block's cases: the noise the interval was built from",
        TIMING,
        default=None,
    )
    unstable: bool = _field(
        "an interval wider than the target (--specbench-ci-target) after the rounds the "
        "budget allowed, and not eliminated by the race",
        TIMING,
    )
    suspect: bool = _field(
        "a decode speedup above tau, which only unequal kernels in the two runs explain (a verify pass cheaper "
        "than a baseline step): its 95% interval's low end (the estimate, with no interval) above tau by more "
        "than 5% (under sampling the largest tau of its requests; batch 1 rows only; results/invariants.py); "
        "the answer does not rank it and a speed-gated run fails it",
        TIMING,
        default=False,
    )
    suspect_cause: str | None = _field(
        "why the row is suspect, in words with the figures: its speedup, tau, and a verify pass's cost over a "
        "baseline step (null when not suspect)",
        TIMING,
        default=None,
    )
    block: str = _field(
        "the block it was timed in: the cases sharing its target and prompt, timed in shared "
        "rounds with baselines between its cases ({target}:{prompt id})",
        TIMING,
        default="",
    )
    block_rounds: list = _field(
        "the block rounds (0-based) the case ran in; its speedups pair each with the "
        "baseline around its run in that round",
        TIMING,
        default=[],
        csv=False,
    )
    block_round_count: int = _field("rounds the whole block ran", TIMING, default=0)
    run_id: str = _field(
        "the run that measured the row (its start time and a random suffix): only rows of "
        "one run were timed in shared rounds, so the answer pairs the rounds of one run's "
        "rows alone; a row --specbench-resume replays keeps its own run's",
        TIMING,
        default="",
        csv=False,
    )
    round_decode_token_s: list = _field(
        "the speculative run's seconds per decode token in each of those rounds", TIMING, default=[], csv=False
    )
    round_wall_s: list = _field(
        "the speculative run's wall seconds (prefill included) in each of those rounds", TIMING, default=[], csv=False
    )
    baseline_round_decode_token_s: list = _field(
        "the baseline's seconds per decode token each round's run "
        "compared with: interpolated in time between the baseline runs "
        "before and after it (every baseline run under "
        "--specbench-baseline-once)",
        TIMING,
        default=[],
        csv=False,
    )
    eliminated_by: int | str | None = _field(
        "the k whose decode speed beat this one in the race (paired over "
        "the rounds both ran; a step-down correction over the comparisons "
        "and the looks keeps the false eliminations of a (pair, engine, "
        "prompt) within 5%), after which it stopped being timed; null if "
        "not eliminated",
        TIMING,
        default=None,
    )
    timing_stop: str = _field(
        "why it stopped being timed: tight (interval within the target), eliminated, case "
        "budget, block budget, run budget (the run's budget was spent) or max rounds",
        TIMING,
        default="",
    )
    resumed_rounds: int = _field(
        "its block's first rounds, which a run stopped mid-block logged and this run (--specbench-resume) "
        "continued from; 0 when this run timed every round",
        TIMING,
        default=0,
    )
    rounds_retimed: str = _field(
        "why a run stopped mid-block had logged rounds of its block that this run timed again (another machine, "
        "kernel build, kernel forms, pairing or set of cases); empty otherwise",
        TIMING,
        default="",
    )
    pairing: str = _field(
        "how its baseline was timed: interleaved (between the run's steps), rounds (whole baseline runs "
        "between the cases), baseline-once (in the first rounds only, compared unpaired) or own-baseline (each "
        "run after a baseline run of its own input: a served engine's block); empty in a row of an older version",
        TIMING,
        default="",
    )
    pairing_reason: str = _field(
        "why the block ran another pairing than the one asked (the hf engine, a batch, --specbench-compile); "
        "empty when the asked pairing ran",
        TIMING,
        default="",
    )
    batch_decode_tps: float | None = _field(
        "batch > 1: speculative decoding speed of the whole batch, tokens "
        "after each row's first summed over the rows per second (median run; "
        "decode_tps holds the same)",
        TIMING,
        default=None,
    )
    batch_baseline_decode_tps: float | None = _field(
        "batch > 1: the target's batched greedy decoding speed over the whole batch, likewise", TIMING, default=None
    )
    draft_time_s: float = _field("seconds spent drafting in the decode phase (median speculative run)", TIMING)
    verify_time_s: float = _field("seconds in target verify passes in the decode phase (median run)", TIMING)
    other_time_s: float = _field("decode seconds neither drafting nor verifying (median run)", TIMING)
    translation_share: float | None = _field(
        "a draft with another tokenizer (cross_tokenizer): the share of the draft time spent re-tokenising "
        "between the two vocabularies, over every timed speculative run (null where no run timed it: a pair "
        "not marked cross_tokenizer, or the hf engine, which re-tokenises inside transformers)",
        TIMING,
        default=None,
    )

    # --- acceptance
    acceptance_rate: float = _field(
        "accepted draft tokens / drafted tokens",
        ACCEPTANCE,
        seed=4,
        summary=("accept", ".3f"),
        gate="compared",
        extra_info=True,
    )
    tau: float = _field(
        "mean tokens committed per decode step (verify pass), bonus token included (batch > 1: a "
        "row's, averaged over the rows)",
        ACCEPTANCE,
        summary=("tau", ".2f"),
        gate="compared",
        extra_info=True,
    )
    drafted_tokens: int = _field("draft tokens proposed", ACCEPTANCE, gate="compared")
    accepted_tokens: int = _field("draft tokens accepted", ACCEPTANCE, gate="compared")
    row_acceptance: list = _field(
        "batch > 1: each row's acceptance (accepted / drafted; null where the row "
        "drafted nothing), rows in batch order",
        ACCEPTANCE,
        default=[],
        csv=False,
    )
    row_acceptance_min: float | None = _field("batch > 1: the lowest row acceptance", ACCEPTANCE, default=None)
    row_acceptance_max: float | None = _field("batch > 1: the highest row acceptance", ACCEPTANCE, default=None)
    # --- per request (results/requests.py): each request counts once, as serving teams read them
    requests: int = _field(
        "requests the per-request fields are over: each timed speculative run (round), a multi-turn run's each "
        "turn, a batched run's each row (the length of request_tpot_ms; 0 in a row of an older version)",
        ACCEPTANCE,
        default=0,
    )
    request_acceptance: list = _field(
        "each request's accepted / drafted tokens (null where it drafted nothing), rounds in order, then turns or rows",
        ACCEPTANCE,
        default=[],
        csv=False,
    )
    request_tau: list = _field(
        "each request's tokens per decode step, bonus included (null without a decode step)",
        ACCEPTANCE,
        default=[],
        csv=False,
    )
    request_tpot_ms: list = _field(
        "each request's time per output token: decode milliseconds per token after its first, prefill excluded "
        "(null for a request of one token; batch > 1: until its row finished)",
        TIMING,
        default=[],
        csv=False,
    )
    request_mean_acceptance: float | None = _field(
        "mean over the requests of their acceptance, each request weighted once (acceptance_rate weights each "
        "drafted token once)",
        ACCEPTANCE,
        default=None,
    )
    acceptance_p10: float | None = _field(
        "10th percentile of request_acceptance over the case's requests (numpy.percentile, linear method)",
        ACCEPTANCE,
        default=None,
    )
    acceptance_p50: float | None = _field("median of request_acceptance, likewise", ACCEPTANCE, default=None)
    acceptance_p90: float | None = _field("90th percentile of request_acceptance, likewise", ACCEPTANCE, default=None)
    tau_p10: float | None = _field(
        "10th percentile of request_tau over the case's requests (numpy.percentile, linear method)",
        ACCEPTANCE,
        default=None,
    )
    tau_p50: float | None = _field("median of request_tau, likewise", ACCEPTANCE, default=None)
    tau_p90: float | None = _field("90th percentile of request_tau, likewise", ACCEPTANCE, default=None)
    tpot_p50_ms: float | None = _field(
        "median time per output token over the case's requests, milliseconds (numpy.percentile, linear method; "
        "over few requests a high percentile lies between the slowest two)",
        TIMING,
        default=None,
    )
    tpot_p95_ms: float | None = _field("95th percentile of request_tpot_ms, likewise", TIMING, default=None)
    tpot_p99_ms: float | None = _field("99th percentile of request_tpot_ms, likewise", TIMING, default=None)
    target_forward_passes: int = _field("target forward passes of one speculative run", ACCEPTANCE)
    draft_forward_passes: int = _field("draft model forward passes of one speculative run", ACCEPTANCE)
    vocabulary_overlap: float | None = _field(
        "a draft with another tokenizer (cross_tokenizer): the share of the target's token texts that the "
        "draft's vocabulary holds too (null for a pair not marked cross_tokenizer; 1.0 for a marked draft "
        "with the target's own tokenizer); acceptance is counted in the target's tokens either way",
        ACCEPTANCE,
        default=None,
    )
    accepted_per_step: list = _field(
        "accepted tokens at each step (batch > 1: every row's decode steps in "
        "turn after one prefill entry, a step of one sequence each)",
        ACCEPTANCE,
        default=[],
        csv=False,
    )
    drafted_per_step: list = _field(
        "drafted tokens at each step (batch > 1: per sequence, as accepted_per_step)", ACCEPTANCE, default=[], csv=False
    )
    k_per_step: list = _field(
        "the draft length chosen at each step (for hf, what it drafted; 0 at the "
        "prefill; batch > 1: per sequence, as accepted_per_step)",
        ACCEPTANCE,
        default=[],
        csv=False,
    )
    position_acceptance: list = _field(
        "entry i-1: of the steps that drafted at least i tokens, the share whose "
        "i-th token was accepted (null where none drafted that many)",
        ACCEPTANCE,
        default=[],
        csv=False,
    )
    accepted_length_histogram: list = _field(
        "entry a: decode steps that drafted something and accepted exactly a tokens", ACCEPTANCE, default=[], csv=False
    )

    # --- cost model (cost_model.py; Leviathan et al. 2023 with a measured verify-cost curve)
    alpha: float | None = _field(
        "per-token acceptance, maximum likelihood under the i.i.d. model with each step "
        "censored at its drafted count (null when nothing was drafted)",
        COST_MODEL,
        default=None,
        summary=("alpha", ".3f"),
    )
    expected_alpha: float | None = _field(
        "under sampling with a draft model: sum over the vocabulary of "
        "min(p, q) at the prompt, the per-token acceptance the rule implies",
        COST_MODEL,
        default=None,
    )
    cost_ratio: float | None = _field(
        "c: the draft's cost per drafted token over a target one-token step "
        "(draft_cost_source says how both were timed; 0 for prompt lookup)",
        COST_MODEL,
        default=None,
    )
    draft_cost_source: str | None = _field(
        "where draft_token_ms, draft_catch_up_ms and c come from: runs (two "
        "untimed native (baseline, speculative) pairs after the pair's warm-up: "
        "draft time per pass over the baseline's time per token) or probe "
        "(single passes timed in turn before any run: --specbench-warmup=0, no "
        "native case of the pair, batch > 1); null for prompt lookup",
        COST_MODEL,
        default=None,
    )
    draft_token_probe_ms: float | None = _field(
        "the probe's draft one-position pass, milliseconds, where the runs' replaced it", COST_MODEL, default=None
    )
    verify_cost_ratio: float | None = _field(
        "v(k+1)/v(1): a verify pass over k+1 positions against a 1-token target step", COST_MODEL, default=None
    )
    predicted_tau: float | None = _field(
        "predicted tokens per verify pass: the mean over the run's decode steps of "
        "(1 - alpha^(d+1)) / (1 - alpha) at each step's drafted length d",
        COST_MODEL,
        default=None,
    )
    predicted_speedup: float | None = _field(
        "predicted decode speedup: the tokens the decode steps committed (tau times the steps) / sum (o + "
        "v(d+1)/v(1) + d c + alpha^(d before) (c2 - c)) over the steps as they ran (d drafted, o the step "
        "overhead, c2 the draft's catch-up pass, no v(m) priced below v(1)); null where prediction_fault says why",
        COST_MODEL,
        default=None,
        summary=("predicted", ".2f"),
    )
    efficiency: float | None = _field(
        "measured decode_speedup / predicted_speedup", COST_MODEL, default=None, summary=("efficiency", ".2f")
    )
    prediction_fault: str | None = _field(
        f"why the prediction is not a figure, in words with the figures: the probe's v(m)/v(1) below {CURVE_FLOOR} "
        f"up to the run's widest pass (a wider pass cheaper than a one-row step; at batch 1 after {PROBE_TRIES} "
        "probes), or (a guard) a predicted speedup above the run's tau, which equal kernels forbid; "
        "predicted_speedup and efficiency are then null (null: none)",
        COST_MODEL,
        default=None,
    )
    recommended_k: int | None = _field(
        "the k maximising that per-step prediction over the drafter's proposal "
        "lengths capped at k (for every drafter), over every k whose verify cost was "
        "measured",
        COST_MODEL,
        default=None,
    )
    draft_catch_up_ms: float | None = _field(
        "the draft's two-position pass, milliseconds: its catch-up after a "
        "block accepted whole (its last drafted token and the target's bonus "
        "token), at the probe's ratio to the one-position pass; null for "
        "prompt lookup",
        COST_MODEL,
        default=None,
    )
    step_overhead_ms: float | None = _field(
        "the median run's decode time outside drafting and verifying, per decode "
        "step, milliseconds (the model charges it once per step)",
        COST_MODEL,
        default=None,
    )
    draft_token_ms: float | None = _field(
        "the draft's cost per drafted token, milliseconds (a draft model's one-position pass; 0 for prompt lookup)",
        COST_MODEL,
        default=None,
    )
    verify_costs_ms: list = _field(
        "entry m-1: v(m), milliseconds of one target pass over m new positions on a "
        "warm cache of the prompt (median of repeats; measured once per pair and worker)",
        COST_MODEL,
        default=[],
        csv=False,
    )
    column_head_rows: list = _field(
        "native engine: the target pass sizes (rows, 1 a decode step; up to k + 1 at a constant k) whose "
        "target output head ran as weight @ hidden.T, measured faster than linear there "
        "(--specbench-kernels); the others ran the model's own linear",
        COST_MODEL,
        default=[],
        csv=False,
    )
    few_rows_rows: list = _field(
        "native engine: the target pass sizes (rows, 1 a decode step of the run and of its greedy "
        "baseline; up to k + 1 at a constant k) at which some linear layer of the target ran the "
        "few-rows kernel, measured fastest there (--specbench-kernels); the others ran the "
        "model's own kernels",
        COST_MODEL,
        default=[],
        csv=False,
    )
    few_rows_kernel: str = _field(
        "the few-rows kernel on this machine: 'built' and the build's identity (its source, CPU flags, torch "
        "and compiler flags), after it ', without AMX tiles: why' where the CPU has AMX and the tiles could not "
        "run, or why it could not be built (torch's own kernels then ran everywhere); empty where no CPU pass "
        "could use it",
        COST_MODEL,
        default="",
    )
    kernel_forms: str = _field(
        "native engine: the forms the target's and the draft's linear layers ran, per layer shape and row count, as "
        "two digests, 'target/draft' ('-': no draft model); under --specbench-kernels=auto settled once per machine "
        "and kept (kernels/settled_forms.py), so runs of one machine agree; compare names rows whose forms differ",
        COST_MODEL,
        default="",
    )
    weight_pages: str = _field(
        "native engine on a CPU: the pages holding the target's weights: '2 MB pages: X of Y GB' (fewer "
        "address translations while a pass streams them), or why 4 KB pages; empty where not asked",
        COST_MODEL,
        default="",
    )
    kernel_step_gain: float | None = _field(
        "native engine: the target's one-row decode step in transformers' own kernels over the "
        "same step in the engine's forms, timed in turn by the cost probe: what the kernels gain, "
        "on both sides of every speedup alike, so part of none",
        COST_MODEL,
        default=None,
    )
    memory_read_gbps: float | None = _field(
        "GB/s of one read of a buffer as large as the target's weights (capped at 1 GiB), in this "
        "process with its threads: the memory limit of a one-row step",
        COST_MODEL,
        default=None,
    )
    one_row_gbps: float | None = _field(
        "the target's weight bytes over v(1), the one-row decode step as the engine runs it: its "
        "effective bandwidth, to set beside memory_read_gbps",
        COST_MODEL,
        default=None,
    )
    verify_pass_gbps: float | None = _field(
        "the target's weight bytes over v(k + 1), the case's full verify pass", COST_MODEL, default=None
    )
    draft_kernel_forms: str = _field(
        "native engine: the draft model's linear layers' forms at one row under the run's kernel setting, by form "
        "and layer count ('rows in 168 layers; rows in the head'), or after 'own: ' why they ran their own kernels "
        "(a dynamic int8 copy's layers are quantised); empty without a draft model",
        COST_MODEL,
        default="",
    )
    draft_one_row_gbps: float | None = _field(
        "native engine: the draft model's weight bytes over its one-position pass in the cost probe: its effective "
        "bandwidth, to set beside memory_read_gbps as one_row_gbps is",
        COST_MODEL,
        default=None,
    )

    # --- memory and size
    target_params: int | None = _field("target parameters", MEMORY, default=None)
    draft_params: int | None = _field("draft model parameters (0 without a draft model)", MEMORY, default=None)
    peak_memory_mb: float | None = _field(
        "on CUDA: peak memory allocated by torch during the case's timed rounds; "
        "on CPU: peak resident memory of the process so far (ru_maxrss), MiB",
        MEMORY,
        default=None,
    )
    peak_memory_kind: str = _field("cuda_allocated or process_rss", MEMORY, default="")
    weights_held_mb: float | None = _field(
        "the most bytes of weights the run's models and drafters held at once so far (shared tensors once), MiB: "
        "what peak_memory_mb compares with",
        MEMORY,
        default=None,
    )

    # --- verdict
    quality_score: float | None = _field(
        "share of positions equal to the target's greedy output (null under sampling)", VERDICT, seed=5
    )
    lossless: bool | None = _field(
        "greedy: output equals the target's greedy output; sampling: the engine's "
        "acceptance rule passed the distribution check (null: not checked)",
        VERDICT,
        gate="compared",
    )
    verdict: str = _field(
        "lossless, tie-divergence or diverged; under sampling lossless or diverged by the "
        "distribution check, not-checked for the hf engine",
        VERDICT,
        summary=("lossless", ""),
        gate="compared",
        extra_info=True,
    )
    baseline_matches_reference: bool | None = _field(
        "the baseline equals generate(do_sample=False) too, or "
        "begins it where an interleaved baseline decoded fewer tokens "
        "(null under sampling)",
        VERDICT,
        csv=False,
    )
    sampling_check_p_value: float | None = _field(
        "under sampling: p-value of the chi-square test of the engine's "
        "accept/resample rule on the case's distributions at the prompt",
        VERDICT,
        default=None,
    )
    sampling_check_statistic: float | None = _field("its chi-square statistic", VERDICT, default=None)
    sampling_check_dof: int | None = _field(
        "its degrees of freedom, after pooling cells expected below 5", VERDICT, default=None, csv=False
    )
    sampling_check_draws: int | None = _field("simulated draft tokens it tested", VERDICT, default=None)
    row_verdicts: list = _field(
        "batch > 1: each row's verdict against both its references (the target's batched "
        "generate with the same padding, and the prompt's unbatched greedy output); the "
        "case's verdict is its worst row's",
        VERDICT,
        default=[],
        csv=False,
    )
    divergent_row: int | None = _field(
        "batch > 1: the row whose divergence the fields below describe", VERDICT, default=None
    )
    divergence_against: str | None = _field(
        "batch > 1: the reference that row differs from: batched or unbatched", VERDICT, default=None
    )
    batched_reference_matches_unbatched: bool | None = _field(
        "batch > 1: the target's batched generate equals its "
        "unbatched greedy output in every row (false: batching "
        "moved its own argmax at a near-tie)",
        VERDICT,
        default=None,
    )
    first_divergence: int | None = _field("first differing new token, if any", VERDICT, default=None)
    top2_margin: float | None = _field("target's top-2 logit margin at the divergence", VERDICT, default=None)
    top2_margin_step: float | None = _field(
        "one step of the logits' dtype at the top logit's size there: a margin up to it is a tie under half precision",
        VERDICT,
        default=None,
        csv=False,
    )
    expected_token: int | None = _field("target's token at the divergence", VERDICT, default=None, csv=False)
    expected_text: str | None = _field("its text", VERDICT, default=None, csv=False)
    got_token: int | None = _field("speculative token at the divergence", VERDICT, default=None, csv=False)
    got_text: str | None = _field("its text", VERDICT, default=None, csv=False)
    context_text: str | None = _field("text before the divergence", VERDICT, default=None, csv=False)

    # --- environment
    device: str = _field("device the case ran on", ENVIRONMENT, default="")
    dtype: str = _field("model dtype", ENVIRONMENT, default="")
    threads: int = _field("torch CPU threads of the process that ran the case", ENVIRONMENT, default=0)
    target_load_s: float = _field(
        "seconds to load the target (a GGUF conversion included)", ENVIRONMENT, default=0.0, csv=False
    )
    target_load_source: str = _field("where the target came from", ENVIRONMENT, default="", csv=False)
    worker: str = _field("xdist worker that ran the case (main without xdist)", ENVIRONMENT, default="main", csv=False)
    model_loads: dict = _field("models loaded so far by that worker, with counts", ENVIRONMENT, default={}, csv=False)

    def to_row(self) -> dict[str, Any]:
        """Plain built-in types, in field order: what travels and what is written."""
        return dataclasses.asdict(self)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> CaseResult:
        """A row read back (a JSON file, the results log, a worker's report) as a typed result: the schema's
        default where the row lacks a field (written before the field existed); fields the schema no longer
        has are dropped. KeyError naming the field when a field without a default is missing."""
        return cls(**{f.name: row[f.name] if f.name in row else field_default(f.name, cls) for f in _fields(cls)})


def _fields(schema: type | None) -> tuple[dataclasses.Field, ...]:
    # Resolved at call time, so a schema extended elsewhere (or in a test) is what every list follows.
    return dataclasses.fields(schema or CaseResult)


def csv_columns(schema: type | None = None) -> tuple[str, ...]:
    """CSV columns: the first seed's five leading columns, then the rest in schema order."""
    columns = [f for f in _fields(schema) if f.metadata.get("csv")]
    seeded = sorted((f for f in columns if f.metadata.get("seed")), key=lambda f: f.metadata["seed"])
    return tuple(f.name for f in seeded) + tuple(f.name for f in columns if not f.metadata.get("seed"))


def summary_columns(schema: type | None = None) -> tuple[tuple[str, str, str, bool], ...]:
    """``(field, header, format, has interval)`` of each summary-table column, schema order, prompt, k and engine
    first."""
    columns = [
        (f.name, *f.metadata["summary"], f.metadata["interval"]) for f in _fields(schema) if f.metadata.get("summary")
    ]
    first = [column for name in ("prompt", "k", "engine") for column in columns if column[0] == name]
    return tuple(first + [column for column in columns if column not in first])


def gate_fields(kind: str, schema: type | None = None) -> tuple[str, ...]:
    """Fields a baseline keeps: ``"compared"`` (checked by the gate) or ``"info"`` (kept for the reader)."""
    return tuple(f.name for f in _fields(schema) if f.metadata.get("gate") == kind)


def extra_info_fields(schema: type | None = None) -> tuple[str, ...]:
    """Fields copied into pytest-benchmark's ``extra_info``."""
    return tuple(f.name for f in _fields(schema) if f.metadata.get("extra_info"))


def field_default(name: str, schema: type | None = None) -> Any:
    """The schema's default of field ``name``: what a row without the field (one written before the field
    existed) holds. KeyError for an unknown field, or for one without a default (every row has it)."""
    for f in _fields(schema):
        if f.name == name:
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            if f.default is not dataclasses.MISSING:
                return f.default
            raise KeyError(f"result field {name!r} has no default: every row must have it")
    raise KeyError(f"no result field {name!r} in the schema")


def row_value(row: Mapping[str, Any], name: str) -> Any:
    """Field ``name`` of a result row (a ``to_row()`` dict, from this run or a JSON file): its value, or the
    schema's default where the row lacks it, so no reader writes a field's default again."""
    return row[name] if name in row else field_default(name)


def field_meanings(schema: type | None = None) -> dict[str, str]:
    """Every field and its one-line meaning, for documentation and the JSON header."""
    return {f.name: f.metadata["meaning"] for f in _fields(schema)}
