"""Batched greedy and speculative decoding (engine/batched.py): lossless per row, rows at their own speed.

Every row is checked against two references:

- the target's own batched ``model.generate(input_ids, attention_mask=..., do_sample=False)`` with the
  same left padding: token-equal, exactly;
- each prompt's unbatched greedy ``generate``: token-equal, or, where batching changed the target's
  argmax at a float32 near-tie (top-2 logits within 1e-4 relative), reported as a tie (a warning),
  never passed silently; a divergence at a clear margin fails.
"""

from __future__ import annotations

import sys
import warnings

import pytest
import torch
from factory import PAD_TOKEN_ID, hf_generate, tiny_model, tiny_pair

from pytest_specbench.engine.batched import (
    RowCache,
    batched_greedy_generate,
    batched_speculative_generate,
    left_pad,
)
from pytest_specbench.engine.decoding import speculative_generate
from pytest_specbench.engine.drafters import (
    Drafter,
    ModelDrafter,
    PromptLookupDrafter,
    RowDrafters,
)

NEW_TOKENS = 24
#: relative top-2 margin below which a batched/unbatched difference is a float near-tie
TIE_TOLERANCE = 1e-4


def _prompts() -> list[list[int]]:
    """Eight prompts of different lengths; two repeat themselves, so prompt lookup finds n-grams."""
    generator = torch.Generator().manual_seed(11)
    lengths = [7, 15, 3, 11, 20, 5, 9, 13]
    prompts = [torch.randint(3, 96, (n,), generator=generator).tolist() for n in lengths]
    prompts[1] = [5, 6, 7, 8, 9, 10] * 2 + [5, 6, 7]
    prompts[6] = [40, 41, 42] * 3
    return prompts


PROMPTS = _prompts()
BATCHES = {1: PROMPTS[:1], 3: PROMPTS[:3], 8: PROMPTS}


@pytest.fixture(scope="module")
def llama_pair():
    return tiny_pair("llama")


def _generate_batched(model, prompts, max_new_tokens, eos_token_id=None) -> list[list[int]]:
    """New tokens per row of transformers' batched greedy ``generate`` with left padding, cut after EOS."""
    ids, mask = left_pad(prompts, PAD_TOKEN_ID)
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_token_id,
            pad_token_id=PAD_TOKEN_ID,
        )
    rows = out[:, ids.shape[1] :].tolist()
    if eos_token_id is not None:
        rows = [row[: row.index(eos_token_id) + 1] if eos_token_id in row else row for row in rows]
    return rows


class References:
    """Both references for one model, computed once per (prompts, max_new_tokens, eos)."""

    def __init__(self, model) -> None:
        self.model = model
        self._batched: dict = {}
        self._single: dict = {}

    def batched(self, prompts, max_new_tokens=NEW_TOKENS, eos_token_id=None):
        key = (tuple(map(tuple, prompts)), max_new_tokens, eos_token_id)
        if key not in self._batched:
            self._batched[key] = _generate_batched(self.model, prompts, max_new_tokens, eos_token_id)
        return self._batched[key]

    def single(self, prompt, max_new_tokens=NEW_TOKENS, eos_token_id=None):
        key = (tuple(prompt), max_new_tokens, eos_token_id)
        if key not in self._single:
            self._single[key] = hf_generate(self.model, prompt, max_new_tokens, eos_token_id)
        return self._single[key]


@pytest.fixture(scope="module")
def llama_refs(llama_pair):
    return References(llama_pair[0])


@torch.inference_mode()
def _near_tie(model, prompt, expected, got, position) -> tuple[bool, float]:
    """Whether the target's top-2 logits where ``got`` leaves ``expected`` (at ``position``) are within the
    tolerance, ``got`` taking the runner-up there."""
    ids = torch.tensor([prompt + expected[:position]])
    logits = model(input_ids=ids).logits[0, -1]
    top = logits.topk(2)
    relative = float((top.values[0] - top.values[1]) / top.values[0].abs().clamp(min=1e-12))
    runner_up = position >= len(got) or got[position] == int(top.indices[1])
    return relative < TIE_TOLERANCE and runner_up, relative


def assert_lossless(
    model, refs: References, prompts, result, max_new_tokens=NEW_TOKENS, eos_token_id=None, label=""
) -> list[str]:
    """Every row against both references; returns the near-ties (each also warned), raises on a divergence."""
    got = result.token_ids
    assert len(got) == len(prompts)
    expected_batched = refs.batched(prompts, max_new_tokens, eos_token_id)
    for row, (tokens, expected) in enumerate(zip(got, expected_batched)):
        assert tokens == expected, f"{label} row {row}: differs from the target's batched generate"
    ties = []
    for row, (prompt, tokens) in enumerate(zip(prompts, got)):
        expected = refs.single(prompt, max_new_tokens, eos_token_id)
        if tokens == expected:
            continue
        position = next(
            (i for i, (a, b) in enumerate(zip(tokens, expected)) if a != b), min(len(tokens), len(expected))
        )
        tie, margin = _near_tie(model, prompt, expected, tokens, position)
        assert tie, (
            f"{label} row {row}: differs from its unbatched greedy output at token {position} where the "
            f"target's top-2 margin is {margin:.3g} relative (not a near-tie)"
        )
        ties.append(
            f"{label} row {row}: batched output differs from unbatched at token {position}, "
            f"a float near-tie (relative top-2 margin {margin:.2g})"
        )
    for tie in ties:
        warnings.warn(tie, stacklevel=2)
    return ties


def _run(target, draft, prompts, k, max_new_tokens=NEW_TOKENS, eos_token_id=None, **kwargs):
    ids, mask = left_pad(prompts, PAD_TOKEN_ID)
    return batched_speculative_generate(target, draft, ids, mask, k, max_new_tokens, eos_token_id, **kwargs)


# --- greedy ------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_batched_greedy_matches_generate(llama_pair, llama_refs, batch_size) -> None:
    target, _ = llama_pair
    prompts = BATCHES[batch_size]
    ids, mask = left_pad(prompts, PAD_TOKEN_ID)
    result = batched_greedy_generate(target, ids, mask, NEW_TOKENS)
    assert_lossless(target, llama_refs, prompts, result, label=f"greedy b{batch_size}")
    assert [row.stats.new_tokens for row in result] == [NEW_TOKENS] * batch_size
    assert [row.prompt_length for row in result] == [len(p) for p in prompts]
    assert result[0].sequences[0, : len(prompts[0])].tolist() == prompts[0]  # the unpadded prompt
    assert result.stats.target_forward_passes == NEW_TOKENS
    assert result.stats.new_tokens == NEW_TOKENS * batch_size


# --- speculative: the lossless matrix ------------------------------------------------------


@pytest.mark.parametrize("k", [1, 4, 8])
@pytest.mark.parametrize("batch_size", [1, 3, 8])
@pytest.mark.parametrize("drafter", ["model", "lookup"])
def test_batched_speculative_is_lossless(llama_pair, llama_refs, drafter, batch_size, k) -> None:
    target, draft = llama_pair
    prompts = BATCHES[batch_size]
    result = _run(target, draft if drafter == "model" else PromptLookupDrafter(), prompts, k)
    assert result.layout == "holes"
    assert_lossless(target, llama_refs, prompts, result, label=f"{drafter} b{batch_size} k{k}")
    for row in result:
        stats = row.stats
        assert stats.new_tokens == NEW_TOKENS
        assert sum(stats.drafted_per_step) == stats.drafted_tokens
        assert sum(stats.accepted_per_step) == stats.accepted_tokens
        assert stats.accepted_tokens + stats.bonus_tokens == stats.new_tokens
        assert max(stats.drafted_per_step) <= k
        assert stats.target_forward_passes == stats.steps <= result.stats.target_forward_passes
    batch = result.stats
    assert batch.new_tokens == NEW_TOKENS * batch_size
    assert batch.accepted_tokens == sum(row.stats.accepted_tokens for row in result)
    assert batch.prefill_tokens == batch_size
    assert 0 < batch.prefill_time_s <= batch.wall_time_s
    assert batch.decode_time_s > 0 and batch.decode_tokens_per_second > 0
    if drafter == "model":
        assert batch.accepted_tokens > 0 and batch.draft_forward_passes > 0
        assert target.device == draft.device


def test_a_model_drafter_and_a_list_of_drafters_work_too(llama_pair, llama_refs) -> None:
    target, draft = llama_pair
    prompts = BATCHES[3]
    result = _run(target, ModelDrafter(draft), prompts, 4)
    assert_lossless(target, llama_refs, prompts, result, label="ModelDrafter")
    result = _run(target, [PromptLookupDrafter(ngram_size=n) for n in (1, 2, 3)], prompts, 4)
    assert_lossless(target, llama_refs, prompts, result, label="per-row drafters")
    with pytest.raises(ValueError, match="one Drafter per row"):
        _run(target, [PromptLookupDrafter()], prompts, 4)


def test_any_batch_drafter_serves_the_batched_engine(llama_pair, llama_refs) -> None:
    """The engine talks to every drafter through the batch form of the one Drafter interface, so a new one plugs
    in by saying it drafts batches."""

    class Silent(Drafter):  # drafts nothing: every step is the target's own token
        drafts_batches = True

        def __init__(self) -> None:
            self.calls: list[str] = []

        def propose(self, committed_ids, k, min_confidence=None):
            return torch.empty(0, dtype=torch.long)

        def prefill_rows(self, ids, mask, layout="auto") -> None:
            self.calls.append("prefill")

        def propose_rows(self, sequences, limits, pad_token_id):
            self.calls.append("propose")
            return [[] for _ in sequences]

    assert all(cls.drafts_batches for cls in (ModelDrafter, PromptLookupDrafter, RowDrafters))
    target, _ = llama_pair
    prompts = BATCHES[3]
    silent = Silent()
    result = _run(target, silent, prompts, 4)
    assert_lossless(target, llama_refs, prompts, result, label="silent drafter")
    assert silent.calls[0] == "prefill" and "propose" in silent.calls
    assert set(result.stats.drafted_per_step) == {0}


def test_a_batch_of_one_steps_as_the_unbatched_engine(llama_pair) -> None:
    target, draft = llama_pair
    for prompt in PROMPTS[:3]:
        batched_run = _run(target, draft, [prompt], 4)[0]
        single = speculative_generate(target, draft, torch.tensor([prompt]), 4, NEW_TOKENS)
        assert batched_run.token_ids == single.token_ids
        assert batched_run.stats.accepted_per_step == single.stats.accepted_per_step
        assert batched_run.stats.drafted_per_step == single.stats.drafted_per_step


def _committed_before_each_step(stats) -> list[int]:
    """Tokens committed before each step (no EOS: every step commits its accepted drafts plus one)."""
    before, total = [], 0
    for accepted in stats.accepted_per_step:
        before.append(total)
        total += accepted + 1
    return before


@pytest.mark.parametrize("max_new_tokens", [3, 7])
def test_both_engines_draft_up_to_k_and_leave_room_for_the_bonus_token(llama_pair, max_new_tokens) -> None:
    target, draft = llama_pair
    k = 8
    prompt = PROMPTS[0]
    single = speculative_generate(target, draft, torch.tensor([prompt]), k, max_new_tokens).stats
    batched_rows = _run(target, draft, [prompt, PROMPTS[3]], k, max_new_tokens)
    for stats in (single, *(row.stats for row in batched_rows)):
        assert stats.new_tokens == max_new_tokens
        # A model draft proposes all it may: k, or what leaves room for the target's own token.
        expected = [min(k, max_new_tokens - before - 1) for before in _committed_before_each_step(stats)[1:]]
        assert stats.drafted_per_step[1:] == expected


def test_both_engines_split_each_steps_time_into_drafting_and_verifying(llama_pair) -> None:
    target, draft = llama_pair
    single = speculative_generate(target, draft, torch.tensor([PROMPTS[0]]), 4, 12).stats
    batched_run = _run(target, draft, PROMPTS[:2], 4, 12)
    for stats in (single, batched_run.stats, *(row.stats for row in batched_run)):
        assert stats.draft_time_s > 0 and stats.verify_time_s > 0
        assert stats.draft_time_s + stats.verify_time_s <= stats.decode_time_s + 1e-9


# --- layouts: holes, and compaction for sliding-window layers --------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["gemma3", "mistral"])
def test_sliding_window_models_compact_and_stay_lossless(arch) -> None:
    target, draft = tiny_pair(arch)  # sliding window 8: prompts and generations run past it
    refs = References(target)
    prompts = BATCHES[8]
    ids, mask = left_pad(prompts, PAD_TOKEN_ID)
    greedy = batched_greedy_generate(target, ids, mask, NEW_TOKENS)
    assert greedy.layout == "compact"
    assert_lossless(target, refs, prompts, greedy, label=f"{arch} greedy")
    for drafter, k in ((draft, 4), (draft, 8), (PromptLookupDrafter(), 4)):
        result = _run(target, drafter, prompts, k)
        assert result.layout == "compact"
        assert_lossless(target, refs, prompts, result, label=f"{arch} k{k}")
    with pytest.raises(ValueError, match="sliding-window"):
        _run(target, draft, prompts, 4, layout="holes")


def test_compact_layout_forced_on_a_full_attention_model(llama_pair, llama_refs) -> None:
    target, draft = llama_pair
    result = _run(target, draft, PROMPTS, 4, layout="compact")
    assert result.layout == "compact"
    assert_lossless(target, llama_refs, PROMPTS, result, label="llama compact")


def test_rollback_keeps_each_rows_own_tokens_and_compaction_right_aligns() -> None:
    model = tiny_model("llama")
    for layout in ("holes", "compact"):
        cache = RowCache(model, layout)
        ids, mask = left_pad([[5, 6, 7], [8, 9, 10, 11, 12]], PAD_TOKEN_ID)
        cache.forward(ids, mask.bool())
        cache.forward(
            torch.tensor([[20, 21, 22], [30, 31, 0]]), torch.tensor([[True, True, True], [True, True, False]])
        )
        assert cache.lengths.tolist() == [6, 7]
        cache.rollback(torch.tensor([4, 7]))  # row 0 drops two of its new tokens, row 1 keeps its own
        assert cache.lengths.tolist() == [4, 7]
        assert cache.valid.sum(dim=1).tolist() == [4, 7]
        if layout == "compact":  # plainly left padded again, no column that no row holds
            assert cache.slots == 7
            assert cache.valid.tolist() == [[False] * 3 + [True] * 4, [True] * 7]
        else:  # row 0 keeps a hole; the last column (no row's token) is cropped
            assert cache.slots == 7
            assert cache.valid.tolist() == [[False, False, True, True, True, True, False], [True] * 7]
        assert int(cache.cache.get_seq_length()) == cache.slots


# --- EOS and finished rows ---------------------------------------------------------------


@pytest.mark.slow
def test_eos_stops_some_rows_and_they_leave_the_batch(llama_pair, llama_refs) -> None:
    target, draft = llama_pair
    free = llama_refs.batched(PROMPTS)
    # An EOS id that some rows generate early and others never do.
    eos = next(
        token for token in range(3, 96) if 2 <= sum(token in row[: NEW_TOKENS - 4] for row in free) <= len(PROMPTS) - 2
    )
    stopping = [row for row, tokens in enumerate(free) if eos in tokens]
    ids, mask = left_pad(PROMPTS, PAD_TOKEN_ID)
    greedy = batched_greedy_generate(target, ids, mask, NEW_TOKENS, eos_token_id=eos)
    assert_lossless(target, llama_refs, PROMPTS, greedy, eos_token_id=eos, label="greedy eos")
    for drafter, k in ((draft, 4), (draft, 8), (PromptLookupDrafter(), 4)):
        result = _run(target, drafter, PROMPTS, k, eos_token_id=eos)
        assert_lossless(target, llama_refs, PROMPTS, result, eos_token_id=eos, label=f"eos k{k}")
        for row, generated in enumerate(result):
            if row in stopping:
                assert generated.token_ids[-1] == eos and generated.stats.new_tokens < NEW_TOKENS
            else:
                assert eos not in generated.token_ids and generated.stats.new_tokens == NEW_TOKENS
        # A finished row takes part in no later pass.
        longest = max(row.stats.target_forward_passes for row in result)
        assert longest == result.stats.target_forward_passes
        assert min(result[row].stats.target_forward_passes for row in stopping) < longest


def test_max_new_tokens_zero_and_one(llama_pair) -> None:
    target, draft = llama_pair
    assert _run(target, draft, PROMPTS[:3], 4, max_new_tokens=0).token_ids == [[], [], []]
    one = _run(target, draft, PROMPTS[:3], 4, max_new_tokens=1)
    assert one.token_ids == [row[:1] for row in _generate_batched(target, PROMPTS[:3], 1)]
    assert one.stats.target_forward_passes == 1


def test_bad_inputs_are_refused(llama_pair) -> None:
    target, draft = llama_pair
    ids, mask = left_pad(PROMPTS[:2], PAD_TOKEN_ID)
    with pytest.raises(ValueError, match="left padded"):
        batched_speculative_generate(target, draft, ids, mask.flip(1), 4, 8)
    with pytest.raises(ValueError, match="k"):
        batched_speculative_generate(target, draft, ids, mask, 0, 8)
    with pytest.raises(ValueError, match="k"):
        batched_speculative_generate(target, draft, ids, mask, True, 8)
    with pytest.raises(ValueError, match="max_new_tokens"):
        batched_speculative_generate(target, draft, ids, mask, 4, True)
    with pytest.raises(TypeError):
        batched_speculative_generate(target, object(), ids, mask, 4, 8)


# --- the planted bug: one row's rollback applied to all rows ---------------------------------


def _shared_rollback(planted: str):
    """RowCache.rollback with one row's rollback applied to every row: row 0's ("row0"), or that of the row
    that rolled back most ("min")."""
    own = RowCache.rollback

    def rollback(self, keep: torch.Tensor) -> None:
        removed = self.lengths - torch.minimum(keep.to(self.lengths.device), self.lengths)
        shared = removed[0] if planted == "row0" else removed.max()
        own(self, (self.lengths - shared).clamp(min=0))

    return rollback


@pytest.mark.parametrize("planted", ["row0", "min"])
@pytest.mark.parametrize("drafter", ["model", "lookup"])
def test_a_shared_rollback_is_caught(llama_pair, llama_refs, monkeypatch, planted, drafter) -> None:
    target, draft = llama_pair
    monkeypatch.setattr(RowCache, "rollback", _shared_rollback(planted))
    result = _run(target, draft if drafter == "model" else PromptLookupDrafter(), PROMPTS, 4)
    with pytest.raises(AssertionError, match="differs"):
        assert_lossless(target, llama_refs, PROMPTS, result, label=f"planted {planted}")
    monkeypatch.undo()
    assert_lossless(
        target,
        llama_refs,
        PROMPTS,
        _run(target, draft if drafter == "model" else PromptLookupDrafter(), PROMPTS, 4),
        label="fixed",
    )


def test_the_unbatched_check_fails_a_clear_divergence_and_reports_a_near_tie(llama_pair, monkeypatch) -> None:
    target, _ = llama_pair
    prompts = BATCHES[3]
    refs = References(target)
    honest = refs.batched(prompts)
    wrong = [list(row) for row in honest]
    with torch.inference_mode():  # row 1 takes the target's runner-up at token 5
        wrong[1][5] = int(target(input_ids=torch.tensor([prompts[1] + honest[1][:5]])).logits[0, -1].topk(2).indices[1])

    class Fake:
        token_ids = wrong

    refs._batched[(tuple(map(tuple, prompts)), NEW_TOKENS, None)] = wrong  # as if batching had changed row 1
    with pytest.raises(AssertionError, match="not a near-tie"):
        assert_lossless(target, refs, prompts, Fake())
    monkeypatch.setattr(sys.modules[__name__], "TIE_TOLERANCE", float("inf"))
    with pytest.warns(UserWarning, match="row 1: batched output differs from unbatched at token 5, a float near-tie"):
        ties = assert_lossless(target, refs, prompts, Fake())
    assert len(ties) == 1


# --- acceptance differs between rows ---------------------------------------------------------


@torch.no_grad()
def _successor_model():
    """A Llama whose greedy next token is ``x + 1`` (95 wraps to 3) whatever came before: attention and MLP
    outputs zeroed, the head matched to the embeddings. Prompt lookup then accepts wherever a row's
    sequence already holds the run it is about to generate."""
    model = tiny_model("llama")
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    embed = model.model.embed_tokens.weight
    unit = embed / embed.norm(dim=1, keepdim=True)
    head = torch.zeros_like(model.lm_head.weight)
    for token in range(3, 96):
        head[3 + (token - 3 + 1) % 93] = 10 * unit[token]
    model.lm_head.weight.copy_(head)
    return model


def test_per_row_acceptance_differs_under_prompt_lookup() -> None:
    target = _successor_model()
    generator = torch.Generator().manual_seed(3)
    random_rows = [torch.randint(3, 96, (n,), generator=generator).tolist() for n in (9, 14, 6)]
    repetitive = list(range(10, 40)) + list(range(10, 16))  # what follows 15 is already in the prompt
    prompts = [random_rows[0], repetitive, random_rows[1], random_rows[2]]
    refs = References(target)
    result = _run(target, PromptLookupDrafter(), prompts, 4, max_new_tokens=20)
    assert_lossless(target, refs, prompts, result, max_new_tokens=20, label="successor")
    assert result[1].token_ids == list(range(16, 36))
    acceptance = result.acceptance_per_row
    assert acceptance[1] > 0.9
    assert acceptance[1] > max(acceptance[0], acceptance[2], acceptance[3]) + 0.3
    steps = [row.stats.steps for row in result]
    assert steps[1] < min(steps[0], steps[2], steps[3])  # the repetitive row finished in fewer passes
