"""Pair definitions: the registry, TOML files and [tool.specbench] in pyproject."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specbench.cases.pairs import BUILTIN_PAIRS, PairError, all_pairs, load_pairs_file, select_pairs


def test_builtin_registry_holds_the_seed_pairs_and_the_embedded_default() -> None:
    assert (BUILTIN_PAIRS["gpt2_distil"].target, BUILTIN_PAIRS["gpt2_distil"].draft) == ("gpt2", "distilgpt2")
    assert BUILTIN_PAIRS["gpt2_tiny"].drafter == "truncated" and BUILTIN_PAIRS["gpt2_tiny"].options == {"num_layers": 2}
    assert (BUILTIN_PAIRS["gpt2_medium"].target, BUILTIN_PAIRS["gpt2_large"].target) == ("gpt2-medium", "gpt2-large")
    assert {BUILTIN_PAIRS["gemma3_int8"].drafter, BUILTIN_PAIRS["gemma3_pld"].drafter} == {"int8", "prompt_lookup"}
    assert all(BUILTIN_PAIRS[name].embedded for name in ("gemma3_int8", "gemma3_pld"))


def test_toml_pairs_resolve_relative_paths_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "pairs.toml"
    path.write_text(
        '[pairs.mine]\ntarget = "./t"\ndraft = "org/draft"\ndtype = "bfloat16"\n'
        '[pairs.lookup]\ntarget = "./t"\ndrafter = "prompt_lookup"\nngram_size = 2\n'
    )
    pairs = load_pairs_file(path)
    assert pairs["mine"].target == str((tmp_path / "t").resolve())
    assert pairs["mine"].draft == "org/draft" and pairs["mine"].dtype == "bfloat16"
    assert pairs["lookup"].options == {"ngram_size": 2} and pairs["lookup"].sources() == (pairs["lookup"].target,)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('target = "a"\ndrafter = "magic"', "accepted: model, truncated, int8, prompt_lookup"),
        ('target = "a"', "needs draft = "),
        ('draft = "b"', "needs target = "),
        ('target = "a"\ndrafter = "int8"\ndraft = "b"', "draft is only for drafter"),
        ('target = "a"\ndraft = "b"\nnum_layers = 0', "num_layers must be an integer >= 1"),
        ('target = "a"\ndraft = "b"\ncolour = "red"', "unknown keys ['colour']"),
        ('target = "a"\ndraft = "b"\ndtype = "int4"', "accepted: float32, float16, bfloat16"),
    ],
)
def test_bad_pair_tables_name_the_file_the_pair_and_what_is_accepted(tmp_path: Path, table: str, message: str) -> None:
    path = tmp_path / "pairs.toml"
    path.write_text(f"[pairs.mine]\n{table}\n")
    with pytest.raises(PairError) as error:
        load_pairs_file(path)
    assert str(path) in str(error.value) and "'mine'" in str(error.value) and message in str(error.value)


def test_malformed_toml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "pairs.toml"
    path.write_text("[pairs.mine\n")
    with pytest.raises(PairError, match="pairs.toml: cannot read pairs file"):
        load_pairs_file(path)


def test_pyproject_pairs_and_pairs_file_extend_the_registry(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.specbench.pairs.proj]\ntarget = "a"\ndraft = "b"\n')
    extra = tmp_path / "extra.toml"
    extra.write_text('[pairs.gpt2_distil]\ntarget = "gpt2"\ndraft = "my/draft"\n')
    pairs = all_pairs(tmp_path, extra)
    assert pairs["proj"].draft == "b"
    assert pairs["gpt2_distil"].draft == "my/draft"  # a file overrides a built-in of the same id
    assert [pair.name for pair in select_pairs(pairs, ("proj", "gemma3_pld"))] == ["proj", "gemma3_pld"]
    with pytest.raises(PairError, match="unknown pair\\(s\\) nope; defined pairs: .*gpt2_distil"):
        select_pairs(pairs, ("nope",))
