"""Keep all cases of one block (a target and a prompt) on one xdist worker: the block is timed in shared rounds.

xdist's own ``loadgroup`` relies on rewriting node ids on the workers, which does not take effect with
the pytest and xdist releases this package supports, so cases are grouped by their block here, on the
controller, from the case id. Whether any case runs is known only once the workers have collected, so
the scheduler is chosen then: the block scheduling when specbench cases run, else the scheduling xdist
itself would have used, so other test suites are distributed exactly as without this plugin.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable

import pytest
from xdist.scheduler import LoadGroupScheduling, LoadScheduling


def wants_block_scheduling(config: pytest.Config) -> bool:
    """xdist is on, and the user chose loadgroup or no --dist at all (xdist itself would pick "load")."""
    dist = getattr(config.option, "dist", "no")
    if not getattr(config.option, "numprocesses", None) and not getattr(config.option, "tx", None):
        return False
    if dist == "loadgroup":
        return True
    given = [
        *config.invocation_params.args,
        *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
        *config.getini("addopts"),
    ]
    return dist in ("no", "load") and not any(arg == "-d" or arg.startswith("--dist") for arg in given)


class _BlockGroups(LoadGroupScheduling):
    def __init__(self, config: pytest.Config, log, case_groups: dict[str, str]) -> None:
        super().__init__(config, log)
        self._case_groups = case_groups

    def _split_scope(self, nodeid: str) -> str:
        case_id = nodeid.partition("[")[2].partition("]")[0]
        if case_id in self._case_groups:
            return f"specbench-block:{self._case_groups[case_id]}"
        return super()._split_scope(nodeid)

    def remove_node(self, node):
        # loadscope hands a crashed worker's whole group, the crashing case included, to the
        # next worker, which then crashes too; mark that case done so only the rest run again.
        workload = self.assigned_work.get(node, {})
        crashed = next((nodeid for unit in workload.values() for nodeid, done in unit.items() if not done), None)
        if crashed is None:
            return super().remove_node(node)
        for unit in workload.values():
            if crashed in unit:
                unit[crashed] = True
        super().remove_node(node)
        return crashed


class BlockScheduling:
    """An xdist scheduler that becomes the block grouping or xdist's own at the first collection.

    ``case_groups`` gives case id -> block once the specbench session has started, None while it has not.
    """

    def __init__(self, config: pytest.Config, log, case_groups: Callable[[], dict[str, str] | None]) -> None:
        self._config, self._log, self._case_groups = config, log, case_groups
        own = LoadGroupScheduling if getattr(config.option, "dist", "no") == "loadgroup" else LoadScheduling
        self._chosen = own(config, log)
        self._decided = False
        self._nodes: list = []

    def add_node(self, node) -> None:
        self._nodes.append(node)
        self._chosen.add_node(node)

    def add_node_collection(self, node, collection) -> None:
        if not self._decided:
            self._decided = True
            groups = self._case_groups()
            if groups is not None:  # specbench cases run: their own grouping, given every node seen so far
                self._chosen = _BlockGroups(self._config, self._log, groups)
                for seen in self._nodes:
                    self._chosen.add_node(seen)
        self._chosen.add_node_collection(node, collection)

    def remove_node(self, node):
        if node in self._nodes:
            self._nodes.remove(node)
        return self._chosen.remove_node(node)

    def __getattr__(self, name: str):
        return getattr(self._chosen, name)

    @property  # type: ignore[misc]
    def __class__(self):
        # xdist names "the scheduler in use" by its class: name the one chosen, so an unrelated suite's
        # output reads exactly as without this plugin.
        return type(self._chosen)
