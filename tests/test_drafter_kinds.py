"""The drafter kinds' registry: a kind's declaration decides what a pair file accepts, the label, what loads, the
fingerprint and which engines run it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specbench.cases import drafter_kinds
from pytest_specbench.cases.drafter_kinds import CROSS, KINDS, kind_of, kind_refusal
from pytest_specbench.cases.matrix import Case
from pytest_specbench.cases.pairs import PairError, PairSpec, pair_from_mapping
from pytest_specbench.cases.prompts import Prompt
from pytest_specbench.measure.engine import PeerMethod
from pytest_specbench.measure.engines import ENGINES

PROMPT = Prompt("natural-1", "natural", "Once upon a time")


def test_a_pair_file_accepts_the_registrys_kinds_and_only_their_own_settings() -> None:
    assert tuple(KINDS) == ("model", "truncated", "int8", "prompt_lookup")
    with pytest.raises(PairError, match="accepted: model, truncated, int8, prompt_lookup"):
        pair_from_mapping("p", {"target": "t", "drafter": "medusa"}, "pairs.toml")
    with pytest.raises(PairError, match="ngram_size is a setting of drafter = prompt_lookup, not 'int8'"):
        pair_from_mapping("p", {"target": "t", "drafter": "int8", "ngram_size": 3}, "pairs.toml")
    pair = pair_from_mapping("p", {"target": "t", "drafter": "truncated", "num_layers": 3}, "pairs.toml")
    assert pair.draft_label == "t first 3 layers" and pair.sources() == ("t",)


def test_a_cross_tokenizer_pair_runs_as_its_own_kind() -> None:
    plain = PairSpec("p", "t", "d")
    crossed = PairSpec("p", "t", "d", cross_tokenizer=True)
    assert kind_of(plain) is KINDS["model"] and kind_of(crossed) is CROSS
    assert kind_of(plain).fingerprint(plain) != kind_of(crossed).fingerprint(crossed)
    assert plain.sources() == crossed.sources() == ("t", "d")
    assert kind_refusal(crossed, batch=2) and kind_refusal(crossed, temperature=0.5)
    assert kind_refusal(plain, batch=2, temperature=0.5) is None


def test_a_kind_without_a_method_in_a_peer_engine_is_skipped_there_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pair = PairSpec("p", "t", drafter="int8")
    case = Case(pair, 4, PROMPT, "natural", engine="hf")
    assert ENGINES["hf"].refusal(case) is None
    hf = ENGINES["hf"]
    without = {name: method for name, method in hf.methods.items() if name != "int8"}
    monkeypatch.setitem(ENGINES, "hf", type(hf)(**{**hf.__dict__, "methods": without}))
    no_method = "hf has no method for an int8 dynamic-quantised copy of the target (pair p)"
    assert ENGINES["hf"].method_for(pair) == no_method
    assert ENGINES["hf"].refusal(case) == no_method
    assert ENGINES["native"].refusal(Case(pair, 4, PROMPT, "natural")) is None  # the native engine runs any kind


def test_a_peer_method_without_a_schedule_runs_integer_k_only() -> None:
    pair = PairSpec("p", "t", drafter="prompt_lookup")
    assert ENGINES["hf"].method_for(pair) == PeerMethod("prompt lookup", integer_k_only=True)
    assert "integer k only, not k=auto" in ENGINES["hf"].refusal(Case(pair, "auto", PROMPT, "natural", engine="hf"))
    assert ENGINES["native"].refusal(Case(pair, "auto", PROMPT, "natural")) is None


def test_no_kind_is_decided_outside_the_registry() -> None:
    # Capabilities are attributes and the registry's answers; no module but the registry compares kind names or
    # checks a drafter's class.
    package = Path(drafter_kinds.__file__).resolve().parents[1]
    kind_classes = ("ModelDrafter", "PromptLookupDrafter", "CrossTokenizerDrafter", "RowDrafters")
    offenders = []
    for path in package.rglob("*.py"):
        if path.name == "drafter_kinds.py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#")[0]
            if any(f"isinstance({arg}" in code.replace(" ", "") for arg in ("drafter", "draft")) and any(
                name in code for name in kind_classes
            ):
                offenders.append(f"{path.name}:{number}")
            if any(f'drafter {op} "' in code for op in ("==", "!=")) or '.drafter == "' in code:
                offenders.append(f"{path.name}:{number}")
    assert offenders == []
