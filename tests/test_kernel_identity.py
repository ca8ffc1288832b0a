"""The few-rows kernel is never replaced in silence: a forced kernel that cannot run is an error, a row records
the build that ran, resume runs again what another build (or another machine) measured, and a damaged cached
build is built again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from factory import tiny_pair

from pytest_specbench.kernels import few_rows
from pytest_specbench.kernels.names import few_rows_built
from pytest_specbench.kernels.verify_forms import KernelForms
from pytest_specbench.results.log import read_log

NO_COMPILER = "could not build the few-rows kernel (RuntimeError: no compiler here)"


@pytest.fixture
def unbuildable(monkeypatch: pytest.MonkeyPatch) -> str:
    """The kernel cannot be built in this process, as on a machine without a compiler."""
    monkeypatch.setattr(few_rows, "_build", lambda: (None, NO_COMPILER))
    return NO_COMPILER


def test_the_kernel_asked_for_by_name_that_cannot_run_is_an_error_in_the_library(unbuildable: str) -> None:
    model, _ = tiny_pair("llama")
    with pytest.raises(RuntimeError, match="kernel setting rows .* cannot run here: could not build"):
        with KernelForms(model, "rows").applied():
            pass
    with KernelForms(model, "auto").applied() as forms:  # auto falls back, and says so
        assert forms.few_rows_kernel == unbuildable


@pytest.mark.slow
def test_the_kernel_asked_for_by_name_that_cannot_run_is_a_usage_error_before_any_model_loads(
    bench, unbuildable: str
) -> None:
    result = bench("--specbench-kernels=rows")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*--specbench-kernels=rows: the few-rows kernel cannot run here: {unbuildable}; accepted here: auto*"]
    )
    # Under auto the run falls back to torch's kernels and says so in the summary.
    result = bench("-k", "k1 and natural")
    result.assert_outcomes(passed=1, deselected=3)
    result.stdout.fnmatch_lines([f"*few-rows kernel not used: {unbuildable}; torch's own kernels ran*"])


@pytest.mark.slow
def test_resume_runs_again_a_case_the_kernel_computed_where_it_cannot_run_now(
    bench, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench("-k", "k1 and natural").assert_outcomes(passed=1, deselected=3)
    logged = read_log(pytester.path / "spec_results.jsonl").rows["tiny-k1-natural"].few_rows_kernel
    assert logged == few_rows.recorded_state()
    if not few_rows_built(logged):
        pytest.skip(f"the kernel cannot be built on this machine: {logged}")
    assert logged == few_rows.identity() and logged.startswith("built specbench_few_rows_")
    monkeypatch.setattr(few_rows, "_build", lambda: (None, NO_COMPILER))
    result = bench("-k", "k1 and natural", "--specbench-resume=spec_results.jsonl")
    result.assert_outcomes(passed=1, deselected=3)
    result.stdout.fnmatch_lines(
        [f"*1 case(s) of spec_results.jsonl run again*tiny-k1-natural (few-rows kernel ({logged} -> {NO_COMPILER}))*"]
    )
    document = json.loads((pytester.path / "spec_results.json").read_text())
    assert document["resumed_cases"] == [] and document["results"][0]["few_rows_kernel"] == NO_COMPILER


@pytest.mark.slow
def test_resume_runs_again_what_another_library_version_measured(bench, pytester: pytest.Pytester) -> None:
    bench("-k", "k1 and natural").assert_outcomes(passed=1, deselected=3)
    log = pytester.path / "spec_results.jsonl"
    lines = log.read_text().splitlines()
    header = json.loads(lines[0])
    header["fingerprint"]["transformers"] = "4.0.0"
    log.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    result = bench("-k", "k1 and natural", "--specbench-resume=spec_results.jsonl")
    result.assert_outcomes(passed=1, deselected=3)
    result.stdout.fnmatch_lines(["*run again*tiny-k1-natural (machine or libraries (transformers '4.0.0' -> *"])
    assert "taken from spec_results.jsonl, not run again" not in result.stdout.str()


#: a stand-in for the kernel's source: the same interface, computed by torch through Python, on pybind11's headers
#: alone (about 6 s a build, where torch's headers take about 30 and the kernel about 45), so that the test builds
#: it twice in seconds; what is under test is the cache's repair, not the kernel
_STAND_IN = """
#include <pybind11/pybind11.h>

namespace py = pybind11;

py::object linear(py::object x, py::object weight, py::object bias, const std::string& variant) {
  return py::module_::import("torch.nn.functional").attr("linear")(x, weight, bias);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("linear", &linear, py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("variant") = "rows");
  m.def("tiles_available", [] { return false; });
  m.attr("tiles_built") = false;
}
"""

_STATE = """
import pathlib, sys
from pytest_specbench.kernels import few_rows
few_rows.SOURCES = (pathlib.Path(sys.argv[1]),)
print(few_rows.recorded_state())
"""


@pytest.mark.slow
def test_a_damaged_cached_build_is_built_again(tmp_path: Path) -> None:
    source = tmp_path / "stand_in.cpp"
    source.write_text(_STAND_IN)
    environment = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "builds")}

    def state() -> str:
        done = subprocess.run(
            [sys.executable, "-c", _STATE, str(source)], env=environment, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    first = state()
    if not few_rows_built(first):
        pytest.skip(f"the kernel cannot be built on this machine: {first}")
    (built,) = (tmp_path / "builds").rglob("specbench_few_rows_*.so")
    built.write_bytes(os.urandom(built.stat().st_size))  # same size, other bytes: a damaged file
    assert state() == first
    assert built.read_bytes()[:4] == b"\x7fELF"  # built again, not the damaged file


def test_the_machine_fingerprint_names_a_kernel_that_fell_back_against_one_that_ran(unbuildable: str) -> None:
    from pytest_specbench.results.fingerprint import fingerprint_differences, machine_fingerprint

    now = machine_fingerprint()
    assert now["few_rows_kernel"] == unbuildable
    before = {**now, "few_rows_kernel": few_rows.identity()}
    assert fingerprint_differences(before, now) == [f"few_rows_kernel {few_rows.identity()!r} -> {unbuildable!r}"]
    assert fingerprint_differences({k: v for k, v in before.items() if k != "few_rows_kernel"}, now) == []
