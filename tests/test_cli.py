"""Shards of one sweep merged back into one run; merge refusals; compare of two runs."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from factory import run_document

from pytest_specbench.cases.matrix import shard_pairs
from pytest_specbench.cases.pairs import PairSpec
from pytest_specbench.cli import COMPARED_OPTIONS, MergeError, compare_lines, main, merge_runs, run_results
from pytest_specbench.results import schema
from pytest_specbench.settings.options import OPTIONS

# Fields that do not depend on timing: identical in every run of the same sweep on any machine.
TIMING_FREE = tuple(
    f.name
    for f in dataclasses.fields(schema.CaseResult)
    if f.metadata["group"] in (schema.IDENTITY, schema.ACCEPTANCE, schema.VERDICT) and f.name not in ("target", "draft")
) + ("alpha", "predicted_tau", "target_params", "draft_params")


@pytest.fixture(scope="module")
def two_pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from factory import write_tiny_pair

    root = tmp_path_factory.mktemp("two_pairs")
    for name, noise in (("tiny_a", 0.01), ("tiny_b", 0.05)):
        write_tiny_pair(root / name, name=name, noise=noise)
    pairs_file = root / "pairs.toml"
    pairs_file.write_text(
        "".join(
            f'[pairs.{name}]\ntarget = "./{name}/target"\ndraft = "./{name}/draft"\n' for name in ("tiny_a", "tiny_b")
        ),
        encoding="utf-8",
    )
    return pairs_file


def test_shards_deal_the_pairs_by_name_and_cover_each_once():
    pairs = [PairSpec(name, "t", "d") for name in ("c", "a", "d", "b", "e")]
    shards = [[pair.name for pair in shard_pairs(pairs, i, 3)] for i in (1, 2, 3)]
    assert shards == [["a", "d"], ["b", "e"], ["c"]]
    assert [pair.name for pair in shard_pairs(pairs, 1, 1)] == ["c", "a", "d", "b", "e"]


@pytest.mark.slow
def test_two_shards_merged_give_the_rows_of_the_unsplit_run(bench, pytester, two_pairs_file, capsys):
    common = ("--specbench-pairs=tiny_a,tiny_b", "--specbench-plots=")
    for shard in ("1/2", "2/2"):
        name = shard.replace("/", "of")
        bench(
            *common, f"--specbench-shard={shard}", f"--specbench-json={name}.json", pairs_file=two_pairs_file
        ).assert_outcomes(passed=4)
    bench(*common, "--specbench-json=whole.json", pairs_file=two_pairs_file).assert_outcomes(passed=8)
    path = Path(pytester.path)
    shard_pairs_seen = [
        {row["pair"] for row in json.loads((path / f"{n}.json").read_text())["results"]} for n in ("1of2", "2of2")
    ]
    assert shard_pairs_seen == [{"tiny_a"}, {"tiny_b"}]
    assert (
        main(
            [
                "merge",
                str(path / "1of2.json"),
                str(path / "2of2.json"),
                "--json",
                str(path / "merged.json"),
                "--csv",
                str(path / "merged.csv"),
                "--report",
                str(path / "merged.md"),
            ]
        )
        == 0
    )
    merged = json.loads((path / "merged.json").read_text())
    whole = json.loads((path / "whole.json").read_text())

    def by_case(document):
        return {row["case"]: {name: row[name] for name in TIMING_FREE} for row in document["results"]}

    assert by_case(merged) == by_case(whole) and len(merged["results"]) == 8
    assert (path / "merged.csv").read_text().count("\n") == 9
    assert "## Pair `tiny_a`" in (path / "merged.md").read_text()
    # compare: every case of one run against the other, with a per-pair line.
    assert main(["compare", str(path / "whole.json"), str(path / "merged.json")]) == 0
    out = capsys.readouterr().out
    assert "tiny_a-k4-natural" in out and "+0.000" in out and "geomean decode speedup old" in out


_run = run_document


#: two values of every option merge compares, as a run's JSON records them (given, or defaulted)
DIFFERING = {
    "gpu": ("cpu", "cuda:0"),
    "kernels": ("auto", "linear"),
    "compile": (None, True),
    "prompt-file": ("prompts_a.jsonl", "prompts_b.jsonl"),
    "context-tokens": ("64", "128"),
    "max-new-tokens": ("32", "128"),
    "dtype": ("float32", "bfloat16"),
    "warmup": ("1", "0"),
    "min-rounds": ("3", "5"),
    "max-rounds": ("30", "10"),
    "ci-target": ("0.05", "0.1"),
    "case-budget": ("30", "20"),
    "threads": ("2", "4"),
    "baseline-every": ("2", "3"),
    "pairing": ("interleaved", "rounds"),
    "baseline-once": (None, True),
    "race": ("on", "off"),
    "tie-tolerance": ("0.1", "0.5"),
    "stop-at-eos": (None, True),
    "temperature": ("0", "0.8"),
    "top-p": ("1", "0.9"),
    "top-k": ("0", "50"),
    "seed": ("0", "1"),
    "sampling-check-draws": ("20000", "1000"),
    "engine": ("native", "hf"),
    "batch": ("1", "1,4"),
    "vllm-args": ("", "--tensor-parallel-size 2"),
    "vllm-endpoints": (None, "baseline=http://node:8000,k4=http://node:8001"),
    "llamacpp-args": ("", "-ngl 99"),
    "llamacpp-endpoints": (None, "baseline=http://node:8080,k4=http://node:8081"),
}


#: every option that does not change what a case measures, and why: a new option fails the test below until it is
#: put here or marked ``changes_results`` (and given two values in DIFFERING)
NOT_RESULT_CHANGING = {
    "pairs": "selects cases (each row names its pair)",
    "pairs-file": "declares pairs; what a pair is, is in its rows (models, drafter, options)",
    "prompts": "selects cases (each row names its prompt, whose text is digested)",
    "prompts-per-category": "selects cases",
    "category-groups": "selects cases",
    "vllm-python": "which interpreter starts vLLM: each served row records vLLM's version and arguments",
    "llamacpp-server": "which binary starts llama.cpp: each served row records its build and arguments",
    "budget": "how long the run may take: rounds that ran are in each row",
    "csv": "an output",
    "json": "an output",
    "log": "an output",
    "history": "an output",
    "resume": "replays rows whose settings agree",
    "cache-dir": "where models are kept",
    "save-baseline": "an output",
    "baseline": "what the gate compares against",
    "max-acceptance-drop": "the gate's bound",
    "max-speedup-drop": "the gate's bound",
    "allow-missing": "the gate's rule",
    "gate-differing": "the gate's rule",
    "plots": "an output",
    "report": "an output",
    "shard": "selects cases",
    "k": "selects cases; how far the probe measured, which the list sets, each row records (verify_costs_ms)",
}


def test_every_option_is_compared_or_says_why_not():
    compared = {option.name for option in COMPARED_OPTIONS}
    assert compared == {option.name for option in OPTIONS if option.changes_results}
    assert compared == set(DIFFERING)  # a new result-changing option needs two values above
    assert {option.name for option in OPTIONS if not option.changes_results} == set(NOT_RESULT_CHANGING)
    assert "engine" in compared  # one engine's run has the same case ids as another's


@pytest.mark.parametrize("option", COMPARED_OPTIONS, ids=lambda option: option.name)
def test_merge_refuses_runs_that_differ_in_a_result_changing_setting(option):
    a, b = DIFFERING[option.name]
    with pytest.raises(MergeError, match=re.escape(f"{option.dest}: a has {a!r}, b has {b!r}")):
        merge_runs([_run(["p-k1-x"], **{option.dest: a}), _run(["q-k1-x"], **{option.dest: b})], ["a", "b"])


def test_merge_joins_shards_that_differ_only_in_what_may_differ():
    # Every option merge does not compare, and the device number (one sweep over the GPUs of one machine).
    free = [option for option in OPTIONS if option not in COMPARED_OPTIONS]
    assert {"specbench_pairs", "specbench_shard", "specbench_json"} <= {option.dest for option in free}
    first = _run(["p-k1-x"], specbench_gpu="cuda:0", **{option.dest: f"{option.name}-1" for option in free})
    second = _run(["q-k1-x"], specbench_gpu="cuda:1", **{option.dest: f"{option.name}-2" for option in free})
    merged = merge_runs([first, second], ["a", "b"]).to_json()
    assert [row["case"] for row in merged["results"]] == ["p-k1-x", "q-k1-x"]
    assert [source["shard"] for source in merged["merged_from"]] == ["shard-1", "shard-2"]
    # The merged record keeps the options the runs share, not one run's value of those that differ (the k list).
    assert merged["options"] == {"specbench_max_new_tokens": "32"}


def test_merge_compares_what_a_value_means_not_how_it_is_written():
    same = merge_runs(
        [
            _run(["p-k1-x"], specbench_temperature="0", specbench_gpu="cuda", specbench_stop_at_eos=False),
            _run(["q-k1-x"], specbench_temperature="0.0", specbench_gpu="cuda:1"),
        ],
        ["a", "b"],
    )
    assert len(same.results) == 2
    with pytest.raises(MergeError, match=re.escape("specbench_gpu: a has 'cuda:0', b has 'cpu'")):
        merge_runs([_run(["p-k1-x"], specbench_gpu="cuda:0"), _run(["q-k1-x"], specbench_gpu="cpu")], ["a", "b"])


def test_merge_takes_batch_sizes_in_any_order_as_resume_does():
    """The batch list's order changes only the order cases run in; resume accepts it, so merge does too."""
    same = merge_runs([_run(["p-k1-x"], specbench_batch="1,4"), _run(["q-k1-x"], specbench_batch="4,1")], ["a", "b"])
    assert len(same.results) == 2
    with pytest.raises(MergeError, match="specbench_batch"):
        merge_runs([_run(["p-k1-x"], specbench_batch="1,4"), _run(["q-k1-x"], specbench_batch="1,2")], ["a", "b"])


def test_merge_refuses_runs_whose_options_make_numbers_incomparable():
    with pytest.raises(MergeError, match=r"specbench_max_new_tokens: a has '32', b has '128'"):
        merge_runs([_run(["p-k1-x"]), _run(["q-k1-x"], specbench_max_new_tokens="128")], ["a", "b"])
    with pytest.raises(MergeError, match="case p-k1-x is in both a and b"):
        merge_runs([_run(["p-k1-x"]), _run(["p-k1-x"])], ["a", "b"])
    # Output paths and the shard itself may differ.
    merged = merge_runs(
        [
            _run(["p-k1-x"], specbench_shard="1/2", specbench_json="a.json"),
            _run(["q-k1-x"], specbench_shard="2/2", specbench_json="b.json"),
        ],
        ["a", "b"],
    ).to_json()
    assert [row["case"] for row in merged["results"]] == ["p-k1-x", "q-k1-x"]
    assert [source["shard"] for source in merged["merged_from"]] == ["1/2", "2/2"]


def test_merge_exits_2_with_the_reason(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_run(["p-k1-x"])))
    b.write_text(json.dumps(_run(["q-k1-x"], specbench_max_new_tokens="8")))
    assert main(["merge", str(a), str(b)]) == 2
    assert "not comparable (specbench_max_new_tokens" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["compare", "merge"])
def test_a_json_whose_rows_lack_fields_is_a_usage_error_naming_file_row_and_field(tmp_path, capsys, command):
    good = _write(tmp_path, "good.json", _run(["p-k1-x"]))
    lacking = _run(["q-k1-x", "q-k4-x"])
    del lacking["results"][1]["acceptance_rate"]
    bad = _write(tmp_path, "bad.json", lacking)
    outputs = ["--json", str(tmp_path / "all.json")] if command == "merge" else []
    assert main([command, good, bad, *outputs]) == 2
    captured = capsys.readouterr()
    assert (
        f"pytest_specbench {command}: {bad}: results[1] (case 'q-k4-x'): not a result row: "
        "1 required field(s) missing (acceptance_rate)" in captured.err
    )
    assert "Traceback" not in captured.err and not (tmp_path / "all.json").exists()
    bad = _write(tmp_path, "bad.json", {**lacking, "results": [{**lacking["results"][0], "k": [4]}, "a row"]})
    assert main(["compare", good, bad]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: results[0] (case 'q-k1-x'): not a result row: k is [4], not int | str" in err
    bad = _write(tmp_path, "bad.json", {**lacking, "results": ["a row"]})
    assert main(["compare", good, bad]) == 2
    assert f"{bad}: results[0]: a str, not an object" in capsys.readouterr().err


def test_compare_marks_a_speedup_beyond_noise():
    old, new = _run(["p-k1-x", "p-k4-x"]), _run(["p-k1-x", "p-k4-x"])
    new["results"][1].update(
        decode_speedup=1.5, decode_speedup_ci_low=1.3, decode_speedup_ci_high=1.7, acceptance_rate=0.6
    )
    text = "\n".join(compare_lines(run_results(old), run_results(new)))
    assert "within noise" in text and "faster" in text and "+0.100" in text


def test_merge_writes_every_file_it_can_when_one_fails(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_run(["p-k1-x"], specbench_shard="1/2")))
    b.write_text(json.dumps(_run(["q-k1-x"], specbench_shard="2/2")))
    (tmp_path / "a_file").write_text("not a folder")
    blocked = tmp_path / "a_file" / "all.csv"  # its folder cannot be made: the CSV alone fails
    assert main(["merge", str(a), str(b), "--csv", str(blocked), "--json", str(tmp_path / "all.json")]) == 2
    assert f"could not write {blocked}" in capsys.readouterr().err
    merged = json.loads((tmp_path / "all.json").read_text())
    assert [row["case"] for row in merged["results"]] == ["p-k1-x", "q-k1-x"]


# --- merge and compare state what differs, and refuse what cannot be compared ------------------------------------


def _machine(capability: str) -> dict:
    return {
        "cpu_model": "CPU",
        "cpu_capability": capability,
        "quantized_engine": "x86",
        "torch_threads": 2,
        "gpus": [],
        "torch": "2.x",
        "transformers": "5.x",
    }


def _write(tmp_path, name, document):
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return str(path)


def _header(out: str) -> list[str]:
    """compare's output from its difference header on (the lines naming the two runs left out)."""
    return [line for line in out.splitlines() if not line.startswith(("old: ", "new: "))]


def test_compare_states_every_difference_of_settings_at_the_top(tmp_path, capsys):
    old = _write(
        tmp_path, "old.json", {**_run(["p-k1-x"], specbench_max_new_tokens="12"), "fingerprint": _machine("AVX2")}
    )
    new = _write(
        tmp_path,
        "new.json",
        {**_run(["p-k1-x"], specbench_max_new_tokens="8", specbench_seed="3"), "fingerprint": _machine("AVX2")},
    )
    assert main(["compare", old, new]) == 2  # refused as merge refuses them
    assert "specbench_max_new_tokens: " in capsys.readouterr().err
    assert main(["compare", old, new, "--force"]) == 0
    lines = _header(capsys.readouterr().out)
    forced = "settings differ (compared anyway: --force)"
    assert lines[0] == f"{forced}: specbench_max_new_tokens: {old} has '12', {new} has '8'"
    assert lines[1] == f"{forced}: specbench_seed: {old} has None, {new} has '3'"
    assert lines[2] == "" and lines[3].startswith("case")


def test_compare_says_when_nothing_differs(tmp_path, capsys):
    old = _write(tmp_path, "old.json", {**_run(["p-k1-x"]), "fingerprint": _machine("AVX2")})
    assert main(["compare", old, old]) == 0
    assert _header(capsys.readouterr().out)[0] == (
        "same settings and machine: every result-changing option and the fingerprint agree"
    )


def test_compare_and_merge_take_runs_of_other_k_lists_and_compare_says_so(tmp_path, capsys):
    old = _write(tmp_path, "old.json", {**_run(["p-k1-x", "p-k4-x"], specbench_k="1,4"), "fingerprint": _machine("X")})
    new = _write(tmp_path, "new.json", {**_run(["p-k1-x", "p-k2-x"], specbench_k="1,2"), "fingerprint": _machine("X")})
    assert main(["compare", old, new]) == 0
    header = _header(capsys.readouterr().out)
    assert header[0].startswith(f"k lists differ (specbench_k: {old} has '1,4', {new} has '1,2'): they choose")
    merged = merge_runs([_run(["p-k4-x"], specbench_k="1,4"), _run(["q-k2-x"], specbench_k="2,1")], ["a", "b"])
    assert len(merged.results) == 2


def test_compare_refuses_greedy_against_sampled_unless_forced(tmp_path, capsys):
    old = _write(tmp_path, "old.json", _run(["p-k1-x"], specbench_temperature="0"))
    new = _write(tmp_path, "new.json", _run(["p-k1-x"], specbench_temperature="1.0"))
    assert main(["compare", old, new]) == 2
    err = capsys.readouterr().err
    assert f"cannot compare {new} with {old}: {old} decoded greedily and {new} by sampling (temperature 1)" in err
    assert "pass --force to compare them anyway" in err
    assert main(["compare", old, new, "--force"]) == 0
    out = capsys.readouterr().out
    assert "settings differ (compared anyway: --force): specbench_temperature" in out
    assert "compared anyway (--force): " in out


def test_compare_refuses_speed_across_machines_unless_forced(tmp_path, capsys):
    old = _write(tmp_path, "old.json", {**_run(["p-k1-x"]), "fingerprint": _machine("AVX512")})
    new = _write(tmp_path, "new.json", {**_run(["p-k1-x"]), "fingerprint": _machine("AVX2")})
    assert main(["compare", old, new]) == 2
    err = capsys.readouterr().err
    assert "their speedups were timed on different machines" in err
    assert "cpu_capability 'AVX512' -> 'AVX2'" in err
    assert main(["compare", old, new, "--force"]) == 0
    assert (
        f"machines differ: {new} ran on another machine than {old}: cpu_capability 'AVX512' -> 'AVX2'"
        in capsys.readouterr().out
    )


def test_compare_refuses_runs_of_other_dtypes_as_merge_does_and_marks_each_line_when_forced(tmp_path, capsys):
    old = _write(tmp_path, "old.json", _run(["p-k1-x", "p-k4-x"], specbench_dtype="float16"))
    new = _write(tmp_path, "new.json", _run(["p-k1-x", "p-k4-x", "p-k8-x"], specbench_dtype="float32"))
    differs = f"specbench_dtype: {old} has 'float16', {new} has 'float32'"
    reason = f"the numbers are not comparable ({differs})"
    assert main(["merge", old, new, "--json", str(tmp_path / "all.json")]) == 2
    assert f"cannot merge {new} with {old}: {reason}; pass --force to merge them anyway" in capsys.readouterr().err
    assert main(["compare", old, new]) == 2
    assert f"cannot compare {new} with {old}: {reason}; pass --force to compare them anyway" in capsys.readouterr().err
    assert main(["compare", old, new, "--force"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"settings differ (compared anyway: --force): {differs}" in lines
    compared = [line for line in lines if line.startswith(("p-k1-x ", "p-k4-x ", "p "))]
    assert len(compared) == 3 and all(line.endswith("not comparable: specbench_dtype") for line in compared)
    [added] = [line for line in lines if line.startswith("p-k8-x ")]
    assert "new case" in added and "not comparable" not in added  # nothing of the old run set beside it


def test_compare_and_merge_refuse_runs_of_other_engines_whose_case_ids_agree(tmp_path, capsys):
    # A run of one engine leaves the engine out of its case ids: a native run's tiny-k2-natural and an hf run's
    # are not one case.
    native = _run(["tiny-k2-natural"], specbench_engine="native")
    hf = _run(["tiny-k2-natural"], specbench_engine="hf")
    hf["results"][0]["engine"] = "hf"
    old, new = _write(tmp_path, "native.json", native), _write(tmp_path, "hf.json", hf)
    differs = f"specbench_engine: {old} has 'native', {new} has 'hf'"
    assert main(["compare", old, new]) == 2
    assert f"cannot compare {new} with {old}: the numbers are not comparable ({differs})" in capsys.readouterr().err
    assert main(["merge", old, new, "--json", str(tmp_path / "all.json")]) == 2
    assert differs in capsys.readouterr().err
    # the same engines in another order are the same setting
    both = [_run(["a-k2-x"], specbench_engine="native,hf"), _run(["b-k2-x"], specbench_engine="hf,native")]
    assert len(merge_runs(both, ["a", "b"]).results) == 2


def _with_kernel(document: dict, few_rows_kernel: str) -> dict:
    return {**document, "results": [{**row, "few_rows_kernel": few_rows_kernel} for row in document["results"]]}


def test_compare_and_merge_refuse_a_run_whose_rows_ran_the_few_rows_kernel_beside_one_that_fell_back(tmp_path, capsys):
    built, fell_back = "built specbench_few_rows_0123456789abcdef", "could not build the few-rows kernel (no ninja)"
    old = _write(tmp_path, "old.json", _with_kernel(_run(["p-k1-x"]), built))
    new = _write(tmp_path, "new.json", _with_kernel(_run(["p-k1-x"]), fell_back))
    same = _write(tmp_path, "same.json", _with_kernel(_run(["p-k1-x"]), built))
    differs = f"few-rows kernel: {old} ran it, {new} did not ({fell_back})"
    assert main(["compare", old, new]) == 2
    assert f"the numbers are not comparable ({differs})" in capsys.readouterr().err
    assert main(["merge", old, new, "--json", str(tmp_path / "all.json")]) == 2
    assert differs in capsys.readouterr().err
    assert main(["compare", old, new, "--force"]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("p-k1-x ")]
    assert line.endswith("not comparable: few_rows_kernel")
    assert main(["compare", old, same]) == 0  # the same build on both sides


def test_compare_marks_a_case_whose_runs_ran_other_kernel_forms(tmp_path, capsys):
    def with_forms(document: dict, forms: str) -> dict:
        return {**document, "results": [{**row, "kernel_forms": forms} for row in document["results"]]}

    old = _write(tmp_path, "old.json", with_forms(_run(["p-k1-x"]), "0123456789ab/-"))
    new = _write(tmp_path, "new.json", with_forms(_run(["p-k1-x"]), "ba9876543210/-"))
    assert main(["compare", old, new]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("p-k1-x ")]
    assert line.endswith("not comparable: kernel_forms")
    assert main(["compare", old, old]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("p-k1-x ")]
    assert "not comparable" not in line


def test_compare_looks_at_every_machine_of_a_merged_run(tmp_path, capsys):
    merged = {
        **_run(["p-k1-x"]),
        "fingerprint": _machine("AVX2"),
        "merged_from": [
            {"run": "s1.json", "fingerprint": _machine("AVX2")},
            {"run": "s2.json", "fingerprint": _machine("AVX512")},
        ],
    }
    old = _write(tmp_path, "old.json", {**_run(["p-k1-x"]), "fingerprint": _machine("AVX2")})
    new = _write(tmp_path, "merged.json", merged)
    assert main(["compare", old, new]) == 2
    assert "(s2.json) ran on another machine" in capsys.readouterr().err


def test_merge_states_machine_differences_and_merges_other_settings_only_when_forced(tmp_path, capsys):
    a = _write(tmp_path, "a.json", {**_run(["p-k1-x"], specbench_shard="1/2"), "fingerprint": _machine("AVX2")})
    b = _write(
        tmp_path,
        "b.json",
        {**_run(["q-k1-x"], specbench_shard="2/2", specbench_max_new_tokens="8"), "fingerprint": _machine("AVX512")},
    )
    out = tmp_path / "all.json"
    assert main(["merge", a, b, "--json", str(out)]) == 2
    assert "not comparable (specbench_max_new_tokens" in capsys.readouterr().err and not out.exists()
    assert main(["merge", a, b, "--json", str(out), "--force"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"settings differ (merged anyway: --force): specbench_max_new_tokens: {a} has '32', {b} has '8'"
    assert lines[1] == f"machines differ: {b} ran on another machine than {a}: cpu_capability 'AVX2' -> 'AVX512'"
    assert "specbench_max_new_tokens" not in json.loads(out.read_text())["options"]  # only what the runs share


def test_merge_keeps_which_rows_were_resumed_and_the_machine_that_measured_them(tmp_path, capsys):
    earlier = {
        "log": "spec_results.jsonl",
        "started": "2026-12-01T09:00:00+00:00",
        "fingerprint": _machine("AVX512"),
        "cases": ["p-k1-x"],
    }
    a = {
        **_run(["p-k1-x", "p-k4-x"], specbench_shard="1/2"),
        "fingerprint": _machine("AVX2"),
        "resumed_cases": ["p-k1-x"],
        "resumed_from": [earlier],
    }
    b = {**_run(["q-k1-x"], specbench_shard="2/2"), "fingerprint": _machine("AVX2")}
    merged = merge_runs([a, b], ["a.json", "b.json"]).to_json()
    assert merged["resumed_cases"] == ["p-k1-x"]
    assert merged["resumed_from"] == [{**earlier, "run": "a.json"}]
    # compare sees the machine of the resumed row too: its speedup was timed elsewhere
    old = _write(tmp_path, "old.json", {**_run(["p-k1-x", "p-k4-x", "q-k1-x"]), "fingerprint": _machine("AVX2")})
    new = _write(tmp_path, "merged.json", merged)
    assert main(["compare", old, new]) == 2
    assert "cpu_capability 'AVX2' -> 'AVX512'" in capsys.readouterr().err
