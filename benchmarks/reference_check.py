"""Does every prompt's lossless reference equal the target's generate() on the whole prompt?

For each model named and each prompt of the shipped suite (or ``--prompt-file``), tokenised as a case
tokenises it, this compares :func:`pytest_specbench.measure.verdicts.reference_tokens` with transformers'
``generate`` called with an all-ones attention mask, greedy, EOS ignored, and counts the prompts holding the
ids a guessed mask would hide (id 0, the pad, BOS and EOS). Exit status 1 when any differs.

    python benchmarks/reference_check.py embedded:gemma3-270m embedded:qwen2.5-coder-0.5b --new-tokens 16
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_specbench.cases.prompts import load_prompts  # noqa: E402
from pytest_specbench.measure.inputs import prompt_input_ids  # noqa: E402
from pytest_specbench.measure.store import ModelStore  # noqa: E402
from pytest_specbench.measure.verdicts import reference_tokens  # noqa: E402


def special_ids(model, tokenizer) -> set[int]:
    found = {
        0,
        tokenizer.pad_token_id,
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
        model.config.pad_token_id,
        model.config.bos_token_id,
    }
    eos = model.config.eos_token_id
    found |= set(eos) if isinstance(eos, list) else {eos}
    return {token for token in found if isinstance(token, int)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="model sources, as a pairs file names them")
    parser.add_argument("--prompt-file", default=None, help="a JSON Lines prompt file (default: the shipped suite)")
    parser.add_argument("--new-tokens", type=int, default=16)
    args = parser.parse_args()
    prompts = load_prompts(args.prompt_file)
    store = ModelStore("cpu", "float32")
    differ = 0
    for source in args.models:
        loaded = store.model(source)
        model, tokenizer = loaded.model, loaded.tokenizer
        specials = special_ids(model, tokenizer)
        holding, holding_zero, equal = 0, 0, 0
        for prompt in prompts:
            ids = prompt_input_ids(tokenizer, prompt, prompts, None, "cpu")
            holding += bool(set(ids[0].tolist()) & specials)
            holding_zero += 0 in ids[0].tolist()
            with torch.inference_mode():
                truth = model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    do_sample=False,
                    max_new_tokens=args.new_tokens,
                    eos_token_id=None,
                )[0, ids.shape[1] :].tolist()
            same = reference_tokens(model, ids, args.new_tokens, None) == truth
            equal += same
            if not same:
                print(f"  {source} {prompt.id}: the reference differs from generate() with the whole prompt")
        differ += len(prompts) - equal
        print(
            f"{source}: {equal} of {len(prompts)} prompts equal; {holding} hold one of the ids "
            f"{sorted(specials)}, {holding_zero} id 0 ({tokenizer.convert_ids_to_tokens(0)!r})"
        )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
