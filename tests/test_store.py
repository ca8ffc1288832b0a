"""ModelStore through the plugin: a draft that does not fit its target fails its cases with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from factory import write_tiny_pair


@pytest.fixture(scope="module")
def wide_draft_pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pair ``tiny`` whose draft has 300 token ids and the same byte tokenizer as its 257-id target."""
    return write_tiny_pair(tmp_path_factory.mktemp("wide_draft"), draft_config={"vocab_size": 300})


@pytest.mark.slow
def test_a_draft_vocabulary_larger_than_the_targets_fails_naming_both(
    fails_plainly, wide_draft_pairs_file: Path
) -> None:
    result = fails_plainly(wide_draft_pairs_file, "k4 and natural")
    result.stdout.fnmatch_lines(
        [
            "*draft '*draft' has vocab_size 300, more than target '*target' with 257: the draft could propose ids "
            "257 to 299, which the target has no embedding for; pair the target with a draft whose vocab_size is "
            "at most 257",
        ]
    )
