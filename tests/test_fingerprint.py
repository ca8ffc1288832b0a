"""The machine fingerprint records the native dtypes of the machine's devices and compares them across runs."""

from __future__ import annotations

import json

import pytest

from pytest_specbench.kernels import native_dtypes as nd
from pytest_specbench.results.fingerprint import fingerprint_differences, machine_fingerprint


def test_the_fingerprint_records_the_cpus_native_dtypes_and_their_facts() -> None:
    fingerprint = machine_fingerprint()
    assert fingerprint["native_dtypes"]["cpu"] == list(nd.native_dtypes("cpu"))
    assert fingerprint["native_dtypes"]["cpu"][0] == "float32"
    assert fingerprint["native_dtype_facts"]["cpu"] == nd.native_dtype_facts("cpu")
    assert json.loads(json.dumps(fingerprint)) == fingerprint


def test_the_fingerprint_records_each_device_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nd, "native_dtype_facts", lambda device: {"device_type": str(device).split(":")[0]})
    fingerprint = machine_fingerprint(devices=("meta",))
    assert set(fingerprint["native_dtypes"]) >= {"cpu", "meta"}
    assert fingerprint["native_dtypes"]["meta"] == ["float32"]


def test_a_capped_onednn_makes_another_machine() -> None:
    plain = machine_fingerprint()
    capped = {**plain, "native_dtypes": {"cpu": ["float32"]}}
    plain = {**plain, "native_dtypes": {"cpu": ["float32", "bfloat16"]}}
    assert fingerprint_differences(plain, capped) == [
        "native_dtypes {'cpu': ['float32', 'bfloat16']} -> {'cpu': ['float32']}"
    ]


def test_a_fingerprint_from_before_native_dtypes_is_the_same_machine() -> None:
    new = machine_fingerprint()
    old = {key: value for key, value in new.items() if key not in ("native_dtypes", "native_dtype_facts")}
    assert fingerprint_differences(old, new) == []
    assert fingerprint_differences(new, old) == []
