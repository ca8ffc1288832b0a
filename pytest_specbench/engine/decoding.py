"""Greedy and speculative decoding for Hugging Face causal LMs, plain functions with no pytest in sight.

>>> spec = speculative_generate(target, draft, input_ids, k=4, max_new_tokens=64)
>>> spec.token_ids == greedy_generate(target, input_ids, max_new_tokens=64).token_ids
True

Greedy speculative decoding (``temperature=0``, the default) is lossless by construction: the target scores the
drafted block in one pass, the longest prefix its argmax agrees with is committed with the target's own next token,
and both KV caches are cropped back to the committed length, so no prefix is recomputed. With ``temperature > 0``
both functions sample and drafts are kept or resampled by :mod:`~pytest_specbench.engine.sampling`, so the output is
distributed as the target's samples. Usage: docs/library.md; sampling: docs/sampling.md.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import Cache, PreTrainedModel

from ..kernels import few_rows
from ..kernels.timing import DeviceClock
from ..kernels.verify_forms import KernelForms, draft_kernel_forms, kernel_forms
from .acceptance import block_limit, greedy_accepted
from .compiled_steps import one_token_step
from .drafters import Drafter, as_drafter
from .inputs import as_batch_of_one, check_lengths
from .kv_cache import cache_length, crop_to, enable_rollback, new_cache, static_cache
from .sampling import GREEDY, SamplingParams, accept_draft, next_token, sampling_distribution
from .schedules import ConstantSchedule, DraftSchedule
from .stats import DecodeStats, GenerationResult, record_step, record_step_times, record_verify_step

__all__ = ["GreedyStepper", "greedy_generate", "speculative_generate"]


def _cut_at_eos(tokens: torch.Tensor, eos_token_id: int | None) -> tuple[torch.Tensor, bool]:
    """Cut a 1-D block of new tokens just after its first EOS, if any."""
    if eos_token_id is None:
        return tokens, False
    hits = (tokens == eos_token_id).nonzero()
    if hits.numel() == 0:
        return tokens, False
    return tokens[: int(hits[0, 0]) + 1], True


def _kernels_given(kernels: KernelForms | str, head_kernel: str | None) -> KernelForms | str:
    """``kernels``, or the deprecated ``head_kernel=`` (its earlier name) where a caller still passes that."""
    if head_kernel is None:
        return kernels
    if not (isinstance(kernels, str) and kernels == "auto"):
        raise TypeError("kernels= and head_kernel= (its earlier, deprecated name) were both given; give kernels=")
    warnings.warn("head_kernel= is deprecated: its name is now kernels=", DeprecationWarning, stacklevel=3)
    return head_kernel


def _longest_block(schedule: DraftSchedule, max_new_tokens: int) -> int:
    """The most rows a verify pass of the run can hold: k + 1 for a constant k, else (a schedule) the few-rows
    kernel's most; never more than the new tokens."""
    longest = schedule.k + 1 if isinstance(schedule, ConstantSchedule) else few_rows.MAX_ROWS
    return max(1, min(longest, max_new_tokens))


def _target_cache(model: PreTrainedModel, length: int, compile_steps: bool) -> Cache:
    """The target's cache for a run of at most ``length`` positions: static for compiled steps."""
    return static_cache(model, length) if compile_steps else new_cache(model)


@torch.inference_mode()
def greedy_generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor | Sequence[int],
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    generator: torch.Generator | None = None,
    eos_token_id: int | None = None,
    kernels: KernelForms | str = "auto",
    compile_steps: bool = False,
    head_kernel: str | None = None,
) -> GenerationResult:
    """Target-only decoding with a KV cache: the baseline.

    Generates exactly ``max_new_tokens`` tokens, or stops after
    ``eos_token_id`` when one is given. Greedy (``temperature=0``) it is
    token-for-token equal to ``model.generate(do_sample=False)``; above zero it
    samples each token from the target's distribution after temperature, top-k
    and top-p, as ``model.generate(do_sample=True)`` does, drawing from ``generator``.

    ``kernels``: the linear layers' forms, as in :func:`speculative_generate`. The default, ``"auto"``,
    settles the one-row forms first, so the baseline runs the kernels a speculative run's passes run
    (:mod:`.verify_forms`); ``"linear"`` keeps the model's own, as ``model.generate`` runs. Pass the model's
    :class:`~.verify_forms.KernelForms` to reuse what it settled, and share it with the speculative runs
    (``head_kernel=`` is the deprecated earlier name of ``kernels=``).
    ``compile_steps=True`` runs the one-token steps through ``torch.compile`` on a static cache
    (:mod:`~pytest_specbench.engine.compiled_steps`).
    """
    forms = kernel_forms(model, _kernels_given(kernels, head_kernel))
    forms.settle(1)
    stepper = GreedyStepper(
        model,
        input_ids,
        max_new_tokens,
        SamplingParams(temperature, top_p, top_k),
        generator,
        eos_token_id,
        compile_steps,
    )
    clock = DeviceClock(model.device)
    stats = DecodeStats()
    with forms.applied():
        start = clock.now()
        while not stepper.done:
            stepper.step()
            record_step(stats, 0, 0, 1, 0)  # every greedy token is the target's own
            if stepper.new_tokens == 1:
                stats.prefill_time_s = clock.now() - start  # the prompt's pass: time to first token
        stats.wall_time_s = clock.now() - start
    stats.verify_time_s = stats.wall_time_s - stats.prefill_time_s
    stats.new_tokens = stepper.new_tokens
    return stepper.result(stats)


class GreedyStepper:
    """Target-only decoding one token a call: :func:`greedy_generate`'s loop, and the baseline that
    :mod:`~pytest_specbench.engine.interleave` runs between another run's steps. The first step is the prefill."""

    def __init__(
        self,
        model: PreTrainedModel,
        input_ids: torch.Tensor | Sequence[int],
        max_new_tokens: int,
        sampling: SamplingParams = GREEDY,
        generator: torch.Generator | None = None,
        eos_token_id: int | None = None,
        compile_steps: bool = False,
    ) -> None:
        check_lengths(max_new_tokens)
        self.ids = as_batch_of_one(input_ids, model.device)
        self.max_new_tokens = max_new_tokens
        self._sampling, self._generator, self._eos = sampling, generator, eos_token_id
        self._cache = _target_cache(model, self.ids.shape[1] + max_new_tokens, compile_steps)
        self._forward = one_token_step(model) if compile_steps else model
        self._feed = self.ids
        self._tokens: list[torch.Tensor] = []
        self._hit_eos = False

    @property
    def new_tokens(self) -> int:
        return len(self._tokens)

    @property
    def done(self) -> bool:
        return self._hit_eos or len(self._tokens) >= self.max_new_tokens

    @torch.inference_mode()
    def step(self) -> None:
        """One target pass and its token (the prompt's pass first)."""
        logits = self._forward(input_ids=self._feed, cache=self._cache, use_cache=True, logits_to_keep=1).logits
        self._feed = next_token(logits[:, -1], self._sampling, self._generator)
        self._tokens.append(self._feed)
        # Reading the token back syncs the device, so only do it when EOS can stop us.
        if self._eos is not None and int(self._feed) == self._eos:
            self._hit_eos = True

    def result(self, stats: DecodeStats) -> GenerationResult:
        """The prompt and the tokens so far, with ``stats``."""
        return GenerationResult(
            sequences=torch.cat([self.ids, *self._tokens], dim=1), prompt_length=self.ids.shape[1], stats=stats
        )


def _verify(target: PreTrainedModel, cache, block: torch.Tensor, proposal: torch.Tensor) -> tuple[int, torch.Tensor]:
    """Score ``block`` (uncached committed tokens + proposal) in one pass.

    Returns how many proposed tokens the target accepts and the target's
    greedy tokens at each proposal position plus one.
    """
    logits = target(input_ids=block, cache=cache, use_cache=True, logits_to_keep=proposal.numel() + 1).logits
    target_tokens = logits[0].argmax(dim=-1)
    return int(greedy_accepted(proposal.unsqueeze(0), target_tokens.unsqueeze(0))[0]), target_tokens


def _verify_sampled(
    target: PreTrainedModel,
    cache,
    block: torch.Tensor,
    proposal: torch.Tensor,
    draft_probs: torch.Tensor | None,
    sampling: SamplingParams,
    generator: torch.Generator | None,
) -> tuple[int, torch.Tensor]:
    """:func:`_verify` under sampling: score ``block`` in one pass, then keep or resample by :func:`accept_draft`.

    ``draft_probs`` is the draft's ``q`` per proposed token, ``None`` for point
    masses. Returns what :func:`_verify` returns, read the same way: how many
    proposed tokens are kept, and tokens whose entry ``num_accepted`` is the
    one committed after them (the kept tokens come first).
    """
    logits = target(input_ids=block, cache=cache, use_cache=True, logits_to_keep=proposal.numel() + 1).logits
    target_probs = sampling_distribution(logits[0], sampling)
    num_accepted, token = accept_draft(target_probs, draft_probs, proposal, generator)
    return num_accepted, torch.cat([proposal[:num_accepted], proposal.new_tensor([token])])


@dataclass(frozen=True, slots=True)
class _Speculation:
    """What every step of one speculative run reads: built once, before the prefill (slots keep the
    per-step attribute reads cheap)."""

    target: PreTrainedModel
    cache: Cache
    drafter: Drafter
    schedule: DraftSchedule
    confidence: dict[str, float]  # a schedule's min_confidence, passed to the drafter when set
    sampling: SamplingParams
    generator: torch.Generator | None
    eos_token_id: int | None
    clock: DeviceClock
    stats: DecodeStats

    @classmethod
    def start(
        cls,
        target: PreTrainedModel,
        draft: PreTrainedModel | Drafter,
        k: int | DraftSchedule,
        input_ids: torch.Tensor | Sequence[int],
        max_new_tokens: int,
        sampling: SamplingParams,
        generator: torch.Generator | None,
        eos_token_id: int | None,
        compile_steps: bool,
    ) -> tuple[_Speculation, torch.Tensor]:
        """Check the arguments, reset the schedule and the drafter, and make the caches; returns the run
        and the prompt as a batch of one. The checks run in this order so a bad call names the same error."""
        check_lengths(max_new_tokens)
        schedule = k if isinstance(k, DraftSchedule) else ConstantSchedule(k)
        schedule.reset()
        # Only passed when set, so a drafter whose propose() takes no min_confidence still works.
        confidence = {} if schedule.confidence_threshold is None else {"min_confidence": schedule.confidence_threshold}
        drafter = as_drafter(draft)
        drafter.reset()
        ids = as_batch_of_one(input_ids, target.device)
        max_length = ids.shape[1] + max_new_tokens
        cache = _target_cache(target, max_length, compile_steps)
        if compile_steps:
            drafter.compile_steps(max_length)
        enable_rollback(cache)
        run = cls(
            target,
            cache,
            drafter,
            schedule,
            confidence,
            sampling,
            generator,
            eos_token_id,
            DeviceClock(target.device),
            DecodeStats(),
        )
        return run, ids


def _draft(run: _Speculation, ids: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Draft: at most ``k`` tokens on the target's device (none for ``k`` 0), with the draft's ``q`` rows
    under sampling (``None`` when greedy, or for a drafter whose proposal is a point mass). A schedule's
    ``min_confidence`` applies when greedy."""
    if k <= 0:
        return ids.new_empty(0), None
    if run.sampling.greedy:
        return run.drafter.propose(ids, k, **run.confidence).to(ids.device)[:k], None
    proposal, draft_probs = run.drafter.propose_sampled(ids, k, run.sampling, run.generator)
    return proposal.to(ids.device)[:k], None if draft_probs is None else draft_probs.to(ids.device)[:k]


def _score(
    run: _Speculation, ids: torch.Tensor, proposal: torch.Tensor, draft_probs: torch.Tensor | None
) -> tuple[int, torch.Tensor]:
    """Verify and accept: score ``proposal`` in one target pass, led by the newest committed token (not fed to
    the target yet); returns what :func:`_verify` returns."""
    block = torch.cat([ids[0, -1:], proposal]).unsqueeze(0)
    if run.sampling.greedy:
        return _verify(run.target, run.cache, block, proposal)
    return _verify_sampled(run.target, run.cache, block, proposal, draft_probs, run.sampling, run.generator)


def _commit(
    run: _Speculation, ids: torch.Tensor, proposal: torch.Tensor, target_tokens: torch.Tensor, num_accepted: int
) -> tuple[torch.Tensor, int, bool]:
    """Commit the accepted drafts and the target's next token, cut just after an EOS; returns the new committed
    sequence, how many tokens it gained, and whether it ended at EOS."""
    committed = torch.cat([proposal[:num_accepted], target_tokens[num_accepted : num_accepted + 1]])
    committed, hit_eos = _cut_at_eos(committed, run.eos_token_id)
    return torch.cat([ids, committed.unsqueeze(0)], dim=1), committed.numel(), hit_eos


def _roll_back(run: _Speculation, committed_length: int, num_accepted: int, proposed: bool) -> None:
    """Roll back: crop the target cache to every committed token but the newest; the drafter keeps what was
    accepted."""
    crop_to(run.cache, min(committed_length - 1, cache_length(run.cache)))
    if proposed:  # only a drafter that was asked to propose has anything to commit
        run.drafter.commit(num_accepted)


def _prefill(run: _Speculation, ids: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """The first step: the target reads the prompt and commits its own first token, and the drafter reads
    the prompt. Returns the prompt plus that token, and whether it is EOS."""
    logits = run.target(input_ids=ids, cache=run.cache, use_cache=True, logits_to_keep=1).logits
    first = next_token(logits[:, -1], run.sampling, run.generator)
    run.drafter.prefill(ids)
    record_step(run.stats, 0, 0, 1, 0)
    return torch.cat([ids, first], dim=1), run.eos_token_id is not None and int(first) == run.eos_token_id


def _speculative_step(
    run: _Speculation, ids: torch.Tensor, max_length: int, t_draft: float
) -> tuple[torch.Tensor, bool, float]:
    """One decode step: draft, verify and accept, commit, roll both caches back, record.

    ``ids`` is the committed sequence, of which the target cache holds all but the newest token;
    ``t_draft`` is the clock reading the step starts from. Returns the new committed sequence,
    whether it ended at EOS, and the clock reading that ended the step.
    """
    chosen_k = run.schedule.next_k()
    block_k = block_limit(chosen_k, max_length - ids.shape[1])
    proposal, draft_probs = _draft(run, ids, block_k)
    t_verify = run.clock.now()
    num_accepted, target_tokens = _score(run, ids, proposal, draft_probs)
    ids, committed, hit_eos = _commit(run, ids, proposal, target_tokens, num_accepted)
    _roll_back(run, ids.shape[1], num_accepted, proposed=block_k > 0)
    run.schedule.update(proposal.numel(), num_accepted)
    t_done = run.clock.now()
    record_step_times(run.stats, t_draft, t_verify, t_done)
    record_verify_step(run.stats, proposal.numel(), num_accepted, committed, chosen_k)
    return ids, hit_eos, t_done


def _decode(
    run: _Speculation, ids: torch.Tensor, max_length: int, start: float, between_steps: Callable[[float], None] | None
) -> tuple[torch.Tensor, float]:
    """The prefill, timed apart so time to first token compares with greedy decoding's, then decode steps until
    ``max_length`` or EOS. ``between_steps`` runs after each step, its time left out of the times reported;
    returns the committed sequence and the seconds spent there."""
    ids, hit_eos = _prefill(run, ids) if ids.shape[1] < max_length else (ids, False)
    t_step = run.clock.now()
    run.stats.prefill_time_s = t_step - start
    paused, t_before = 0.0, start
    while True:
        if between_steps is not None and t_step > t_before:
            between_steps(t_step - t_before)
            t_resumed = run.clock.now()
            paused += t_resumed - t_step
            t_step = t_resumed
        if hit_eos or ids.shape[1] >= max_length:
            return ids, paused
        t_before = t_step
        # Each step starts where the last one ended: one device sync fewer.
        ids, hit_eos, t_step = _speculative_step(run, ids, max_length, t_step)


@torch.inference_mode()
def speculative_generate(
    target: PreTrainedModel,
    draft: PreTrainedModel | Drafter,
    input_ids: torch.Tensor | Sequence[int],
    k: int | DraftSchedule,
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    generator: torch.Generator | None = None,
    eos_token_id: int | None = None,
    kernels: KernelForms | str = "auto",
    compile_steps: bool = False,
    between_steps: Callable[[float], None] | None = None,
    head_kernel: str | None = None,
    draft_kernels: KernelForms | str | None = None,
) -> GenerationResult:
    """Speculative decoding: greedy, equal to the target's greedy output, or sampled, distributed as its samples.

    ``draft``: a causal LM sharing the target's tokenizer, or any :class:`~pytest_specbench.engine.drafters.Drafter`.
    After the prefill (``stats.prefill_time_s``) each step drafts up to ``k`` tokens, or what a
    :class:`~pytest_specbench.engine.schedules.DraftSchedule` chooses, verifies them in one target pass and commits
    the accepted prefix plus the target's next token, until ``max_new_tokens`` or just after ``eos_token_id``.
    ``temperature > 0`` samples (:func:`~pytest_specbench.engine.sampling.accept_draft`), ``top_p``/``top_k`` filter
    both models' logits as ``model.generate`` does, and a seeded ``generator`` makes it reproducible.
    ``kernels``: the target's linear layers' forms (:mod:`~pytest_specbench.kernels.verify_forms`): the target's
    :class:`~.verify_forms.KernelForms`, run as settled, or a setting (``"auto"``, ``"rows"``, ``"column"``,
    ``"linear"``) for forms of this call alone, ``auto``'s settled first for every block the run can verify
    (``head_kernel=`` is the deprecated earlier name of ``kernels=``);
    ``draft_kernels``: the draft model's forms, likewise (its :class:`~.verify_forms.KernelForms`, or a setting);
    None: the target's setting, so that every model in the loop runs one kernel setting;
    ``compile_steps=True``: static caches and compiled draft steps (:mod:`~pytest_specbench.engine.compiled_steps`);
    ``between_steps(seconds)`` runs after the prefill and each step, untimed (the interleaved baseline runs there,
    with the target's linear layers in the same forms).
    """
    sampling = SamplingParams(temperature, top_p, top_k)
    run, ids = _Speculation.start(
        target, draft, k, input_ids, max_new_tokens, sampling, generator, eos_token_id, compile_steps
    )
    prompt_length = ids.shape[1]
    given = _kernels_given(kernels, head_kernel)
    forms = kernel_forms(target, given)
    if forms is not given:  # this call's own forms: settled here, before the clock starts
        forms.settle(_longest_block(run.schedule, max_new_tokens))
    draft_forms = draft_kernel_forms(run.drafter.model, draft_kernels, forms, run.drafter.pass_rows)
    # An interleaved baseline's steps run in between, under the same forms: equal kernels on both sides.
    with contextlib.ExitStack() as applied:
        applied.enter_context(forms.applied())
        if draft_forms is not None:
            applied.enter_context(draft_forms.applied())
        start = run.clock.now()
        ids, paused = _decode(run, ids, prompt_length + max_new_tokens, start, between_steps)
    stats = run.stats
    stats.wall_time_s = run.clock.now() - start - paused
    stats.draft_forward_passes = run.drafter.forward_passes
    stats.translation_time_s = run.drafter.translation_time_s
    stats.new_tokens = ids.shape[1] - prompt_length
    return GenerationResult(sequences=ids, prompt_length=prompt_length, stats=stats)
