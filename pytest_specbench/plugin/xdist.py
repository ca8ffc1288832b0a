"""Keep all cases of one model pair on one xdist worker, so it loads each model once.

xdist's own ``loadgroup`` relies on rewriting node ids on the workers, which
did not take effect with the pytest and xdist releases this was built on, so
cases are grouped by their pair here, on the controller, from the case id.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdist.scheduler import LoadGroupScheduling


def _pair_scheduling(case_pairs: dict[str, str]):
    class PairScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            case_id = nodeid.partition("[")[2].partition("]")[0]
            if case_id in case_pairs:
                return f"specbench-pair:{case_pairs[case_id]}"
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

    return PairScheduling


class PairGroupScheduler:
    """An xdist plugin object: one scope per pair; other tests as ``loadgroup`` schedules them."""

    def __init__(self, cases: Sequence) -> None:
        self._scheduling = _pair_scheduling({case.id: case.pair.name for case in cases})

    def pytest_xdist_make_scheduler(self, config, log):
        return self._scheduling(config, log)
