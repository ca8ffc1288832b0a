"""pytest-specbench: benchmark speculative decoding of language models under pytest.

The decoding engine is a plain library and works without pytest.
"""

from .decoding import greedy_generate, speculative_generate
from .drafters import Drafter, ModelDrafter
from .stats import DecodeStats, GenerationResult

__all__ = [
    "DecodeStats",
    "Drafter",
    "GenerationResult",
    "ModelDrafter",
    "greedy_generate",
    "speculative_generate",
]
