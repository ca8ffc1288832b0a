"""A case's inputs fingerprint, computed without loading a model: what --specbench-resume compares before it
replays a logged row, and the words it names a change with."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from factory import case_result

from pytest_specbench.cases.matrix import build_matrix
from pytest_specbench.cases.pairs import load_pairs_file
from pytest_specbench.cases.prompts import Prompt
from pytest_specbench.measure.case_inputs import case_inputs, inputs_changes, replayable
from pytest_specbench.settings.config import parse_settings

PROMPTS = [Prompt("natural-01", "natural", "Once upon a time"), Prompt("code-01", "code", "def f():")]


@pytest.fixture
def config(tmp_path: Path):
    return dataclasses.replace(parse_settings({}), cache_dir=tmp_path / "cache")


def _first_case(pairs_file: Path, prompts=PROMPTS, engines=("native",)):
    return build_matrix([load_pairs_file(pairs_file)["tiny"]], (1, 4), prompts, engines)[0]


def test_other_models_under_the_same_pair_name_are_a_change_of_models(tiny_pairs_file, weak_pairs_file, config) -> None:
    logged = case_inputs(_first_case(tiny_pairs_file), config, PROMPTS)
    assert inputs_changes(logged, case_inputs(_first_case(tiny_pairs_file), config, PROMPTS)) == []
    # The same target weights in another folder are the same target; the draft is another model.
    now = case_inputs(_first_case(weak_pairs_file), config, PROMPTS)
    assert inputs_changes(logged, now) == ["draft model"]


def test_weights_replaced_in_place_are_a_change_of_models(
    tiny_pairs_file, weak_pairs_file, config, tmp_path: Path
) -> None:
    copy = tmp_path / "pair"
    shutil.copytree(tiny_pairs_file.parent, copy)
    logged = case_inputs(_first_case(copy / "pairs.toml"), config, PROMPTS)
    weights = "draft/model.safetensors"
    shutil.copyfile(weak_pairs_file.parent / weights, copy / weights)
    now = case_inputs(_first_case(copy / "pairs.toml"), config, PROMPTS)
    assert inputs_changes(logged, now) == ["draft model"]


def test_prompt_text_and_case_settings_are_named_as_changes(tiny_pairs_file, config) -> None:
    logged = case_inputs(_first_case(tiny_pairs_file), config, PROMPTS)
    edited = [Prompt("natural-01", "natural", "Once upon a midnight dreary"), PROMPTS[1]]
    assert inputs_changes(logged, case_inputs(_first_case(tiny_pairs_file, edited), config, edited)) == ["prompt text"]
    hf = _first_case(tiny_pairs_file, engines=("hf",))  # one engine: the same case id, another engine
    assert hf.id == _first_case(tiny_pairs_file).id
    assert inputs_changes(logged, case_inputs(hf, config, PROMPTS)) == ["case settings (engine, k, batch, dtype)"]


def test_only_rows_whose_inputs_match_are_replayed(tiny_pairs_file, weak_pairs_file, config) -> None:
    cases = build_matrix([load_pairs_file(tiny_pairs_file)["tiny"]], (1, 4), PROMPTS)
    rows = {case.id: case_result(case=case.id, inputs_fingerprint=case_inputs(case, config, PROMPTS)) for case in cases}
    rows[cases[1].id].inputs_fingerprint = case_inputs(
        build_matrix([load_pairs_file(weak_pairs_file)["tiny"]], (1, 4), PROMPTS)[1], config, PROMPTS
    )
    rows[cases[2].id] = case_result(case=cases[2].id)  # a row of a log written before inputs were recorded
    rows["other-k1-natural"] = case_result(case="other-k1-natural")  # not in this run's matrix: kept as it is
    replayed, rerun = replayable(rows, cases, config, PROMPTS)
    assert sorted(replayed) == sorted([cases[0].id, cases[3].id, "other-k1-natural"])
    assert rerun == {cases[1].id: ["draft model"], cases[2].id: ["inputs not recorded"]}


def test_marking_a_pair_cross_tokenizer_changes_its_drafter_settings(tiny_pairs_file, config) -> None:
    # A log made with the plain drafter must not be replayed for the text bridge: the same models, another drafter.
    plain = _first_case(tiny_pairs_file)
    crossed = dataclasses.replace(plain, pair=dataclasses.replace(plain.pair, cross_tokenizer=True))
    assert plain.id == crossed.id
    changes = inputs_changes(case_inputs(plain, config, PROMPTS), case_inputs(crossed, config, PROMPTS))
    assert changes == ["drafter settings"]


def test_the_case_part_is_the_fingerprinted_axes_as_logged_before_the_axes_were_declared(tiny_pairs_file, config):
    import hashlib
    import json

    case = _first_case(tiny_pairs_file)
    before = {"engine": case.engine, "k": case.k, "batch": case.batch, "dtype": case.dtype}  # the hand-built part
    digest = hashlib.sha256(json.dumps(before, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]
    assert case_inputs(case, config, PROMPTS)["case"] == digest  # logs of earlier versions still replay
