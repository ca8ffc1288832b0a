"""How a block times its baseline beside its cases' runs: one strategy, its kinds and why a block runs the one it does.

- ``interleaved``: each run carries its own baseline, stepped between the run's steps (:mod:`..engine.interleave`);
- ``rounds``: whole baseline runs between the cases, each run paired with the baseline interpolated in time;
- ``baseline-once``: a baseline in the first rounds only, compared unpaired (``--specbench-baseline-once``);
- ``own-baseline``: each case's run right after a baseline run of its own input, where a block's cases decode
  different prompts (a served engine's block), so no baseline serves them all.

A block interleaves only when asked to and when every case of it can; otherwise it runs rounds, and the strategy
names each cause (see docs/measuring.md, "Timing").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..settings.config import SpecbenchConfig
from ..settings.options import BASELINE_ONCE, INTERLEAVED, ROUNDS

OWN_BASELINE = "own-baseline"
PAIRING_KINDS = (INTERLEAVED, ROUNDS, BASELINE_ONCE, OWN_BASELINE)

#: why a block does not interleave, one reason per cause
HF_WHOLE_RUNS = "the hf engine: transformers' generate runs whole, with no place for a baseline between its steps"
SERVED_WHOLE_RUNS = (
    "a served engine: a request runs whole on its server, with no place for a baseline between its steps"
)
BATCHED_RUNS = "batch > 1: the batched engine has no hook between its steps"
COMPILED_STEPS = (
    "--specbench-compile: a compiled baseline step between the run's steps changed the run's output "
    "(tests/test_compiled_steps.py)"
)
MULTI_TURN_RUNS = (
    "a multi-turn prompt: each turn's run starts from its own input, and a baseline between its steps would "
    "cross from one turn's to the next"
)
OWN_INPUTS = (
    "the block's cases decode different prompts (a served engine's block), so each case's run follows a baseline "
    "run of its own input"
)
ROUNDS_ASKED = "--specbench-pairing=rounds asked"
BASELINE_ONCE_ASKED = "--specbench-baseline-once asked"


@dataclass(frozen=True)
class Pairing:
    """The pairing a block runs, and every cause that kept it from interleaving (empty when it interleaves).

    ``settings_reasons`` come from the run's options, ``case_reasons`` from the cases that cannot interleave;
    ``asked`` is the kind the options asked for."""

    kind: str = ROUNDS
    asked: str = ROUNDS
    settings_reasons: tuple[str, ...] = ()
    case_reasons: tuple[str, ...] = ()

    @property
    def interleaved(self) -> bool:
        return self.kind == INTERLEAVED

    @property
    def paired(self) -> bool:
        """Each run is compared with a baseline of its own (interleaved or interpolated), not with them all."""
        return self.kind != BASELINE_ONCE

    @property
    def reasons(self) -> tuple[str, ...]:
        return self.settings_reasons + self.case_reasons

    @property
    def reason(self) -> str:
        """The row's ``pairing_reason``: empty when the asked pairing ran, else why it could not."""
        return "" if self.kind == self.asked else "; ".join(self.reasons)

    def interleaves(self, refusal: str | None) -> bool:
        """Whether a case that gives ``refusal`` (None: it can interleave) is interleaved when timed alone
        under these settings, as the warm-up's calibration pairs are."""
        return not self.settings_reasons and refusal is None


def choose_pairing(config: SpecbenchConfig, case_refusals: Iterable[str | None], shared_input: bool = True) -> Pairing:
    """The block's pairing from the run's options and each case's reason not to interleave (None: it can);
    ``shared_input`` False: the block's cases decode different inputs, and each has a baseline of its own."""
    settings: list[str] = []
    if config.baseline_once:
        settings.append(BASELINE_ONCE_ASKED)
    elif config.pairing != INTERLEAVED:
        settings.append(ROUNDS_ASKED)
    if config.compile_steps:
        settings.append(COMPILED_STEPS)
    cases = tuple(dict.fromkeys(refusal for refusal in case_refusals if refusal))
    asked = BASELINE_ONCE if config.baseline_once else config.pairing
    if not shared_input:
        return Pairing(OWN_BASELINE, asked, tuple(settings), (*cases, OWN_INPUTS))
    kind = asked if asked != INTERLEAVED else (ROUNDS if settings or cases else INTERLEAVED)
    return Pairing(kind, asked, tuple(settings), cases)
