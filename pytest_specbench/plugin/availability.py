"""Which pairs can run here: each model's availability probed once, whether the user asked for a pair, and why
nothing ran when a selection matched no case."""

from __future__ import annotations

from collections.abc import Sequence

from ..cases.matrix import Case
from ..cases.pairs import PairSpec, default_pair_names
from ..settings.config import SpecbenchConfig


class PairAvailability:
    def __init__(self, config: SpecbenchConfig, defined: dict[str, PairSpec]) -> None:
        self._config = config
        self._defined = defined  # every pair defined (built in, pyproject, pairs file)
        self._known: dict[tuple[str, str | None, bool], str | None] = {}  # (source, revision, probe_hub) -> reason

    def unavailable_reason(self, pair: PairSpec, probe_hub: bool = True) -> str | None:
        """Why ``pair`` cannot run here (its first missing model, with the command that fetches it), or None.

        ``probe_hub=False`` looks at local files only: a hub model not in the cache is then unavailable. So is it
        for a pair nobody chose (:meth:`chosen`): a run downloads only the models the user asked for.
        """
        from ..models.loading import model_available

        probe_hub = probe_hub and self.chosen(pair)
        for source in pair.sources():
            revision = pair.revision if source == pair.target else None
            key = (source, revision, probe_hub)
            if key not in self._known:
                self._known[key] = model_available(
                    source, revision=revision, probe_hub=probe_hub, cache_dir=self._config.cache_dir
                )
            if self._known[key]:
                declared = f" (the pair is declared in {pair.declared_in})" if pair.declared_in else ""
                return f"{pair.name}: {self._known[key]}{declared}"
        return None

    def chosen(self, pair: PairSpec) -> bool:
        """Whether the user asked for ``pair``: named in --specbench-pairs, or declared in a pairs file or
        pyproject.toml. A chosen pair whose model is missing fails; only built-in pairs nobody named are skipped."""
        return pair.name in self._config.pairs or pair.declared_in is not None

    def left_out(self) -> tuple[str, ...]:
        """The built-in pairs the default selection left out on this device (none when --specbench-pairs is given)."""
        return () if self._config.pairs else default_pair_names(self._defined, self._config.on_gpu)[1]

    def empty_selection_lines(self, pairs: Sequence[PairSpec], cases: Sequence[Case]) -> list[str]:
        """Why nothing ran when -k/-m matched no case: what this machine's matrix holds, and how to add more."""
        ks = ", ".join(str(k) for k in self._config.ks)
        prompts = ", ".join(dict.fromkeys(case.prompt_label for case in cases))
        in_matrix = {pair.name for pair in pairs}
        ready, other = [], []
        for name, pair in self._defined.items():
            reason = self.unavailable_reason(pair, probe_hub=False)
            if reason is not None:
                other.append(reason)
            elif name in in_matrix:
                ready.append(name)
            else:
                other.append(f"{name}: not in --specbench-pairs")
        lines = [
            f"no specbench case matched the selection (-k/-m); this run's matrix has k values {ks}, "
            f"prompts {prompts}, and the pairs {', '.join(ready) or 'none'} ready to run",
            "add k values with --specbench-k=1,2,4,8,16, prompts with --specbench-prompts, "
            "pairs with --specbench-pairs; not ready here:",
        ]
        lines += [f"  {line}" for line in other]
        return lines
