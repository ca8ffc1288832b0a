"""The timing checks: the package's clock (kernels.timing.DeviceClock) must bracket GPU work with
torch.cuda.synchronize(); on a CPU they become clock sanity checks."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from .context import Context


class GpuWork:
    """Work of a known length on the current CUDA stream: torch.cuda._sleep calibrated with CUDA events
    (a spin of N clock cycles), or, without it, repeated large matmuls calibrated the same way."""

    def __init__(self, device) -> None:
        import torch

        self.torch, self.device = torch, device
        self.how = "torch.cuda._sleep" if hasattr(torch.cuda, "_sleep") else "matmul"
        if self.how == "matmul":
            self._a = torch.randn(2048, 2048, device=device)
            self._b = torch.empty_like(self._a)
        units = 1_000_000 if self.how == "torch.cuda._sleep" else 1
        self._enqueue(units)  # warm up
        torch.cuda.synchronize(device)
        for _ in range(12):
            ms = self.events_ms(lambda: self._enqueue(units))
            if ms >= 20 or units > 10**12:
                break
            units = int(units * max(2.0, 25.0 / max(ms, 0.01)))
        self.per_ms = units / max(ms, 1e-3)

    def _enqueue(self, units: int) -> None:
        if self.how == "torch.cuda._sleep":
            self.torch.cuda._sleep(int(units))
        else:
            for _ in range(max(1, int(units))):
                self.torch.mm(self._a, self._a, out=self._b)

    def enqueue(self, milliseconds: float) -> None:
        """Queue about ``milliseconds`` of work without waiting for it."""
        self._enqueue(max(1, int(self.per_ms * milliseconds)))

    def enqueue_timed(self, milliseconds: float) -> Callable[[], float]:
        """Queue the work between two CUDA events; the callable returned reads its duration once run."""
        start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
        start.record()
        self.enqueue(milliseconds)
        end.record()
        return lambda: float(start.elapsed_time(end))

    def events_ms(self, work: Callable[[], None]) -> float:
        """How long ``work`` runs on the GPU, by CUDA events (waits for it)."""
        start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))


def check_timing_sync_clock(ctx: Context) -> tuple[str, str, dict]:
    """GPU work of known length read by DeviceClock and by CUDA events agrees (CPU: a sleep's length)."""
    from ...kernels.timing import DeviceClock

    clock = DeviceClock(ctx.device)
    if not ctx.cuda:
        return _cpu_clock_sanity(clock)
    import torch

    work = GpuWork(ctx.torch_device)
    target_ms = 200.0
    trials = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = clock.now()
        start.record()
        work.enqueue(target_ms)
        end.record()
        t1 = clock.now()
        end.synchronize()
        trials.append({"clock_ms": (t1 - t0) * 1000, "events_ms": float(start.elapsed_time(end))})
    # The same work read without a synchronise: the launch alone, which shows the kernel runs asynchronously.
    t0 = time.perf_counter()
    work.enqueue(target_ms)
    launch_ms = (time.perf_counter() - t0) * 1000
    torch.cuda.synchronize(ctx.torch_device)
    clock_ms = statistics.median(t["clock_ms"] for t in trials)
    events_ms = statistics.median(t["events_ms"] for t in trials)
    details = {
        "work": work.how,
        "units_per_ms": work.per_ms,
        "trials": trials,
        "unsynchronised_launch_ms": launch_ms,
    }
    asynchronous = launch_ms < 0.5 * events_ms
    ok = events_ms >= 0.25 * target_ms and clock_ms >= 0.98 * events_ms - 0.5 and clock_ms <= 1.10 * events_ms + 5.0
    note = (
        ""
        if asynchronous
        else (
            " (but the launch itself took as long: launches are synchronous here, "
            "CUDA_LAUNCH_BLOCKING?, so a missing synchronise would not show)"
        )
    )
    return (
        ("pass" if ok else "fail"),
        (
            f"{work.how} work of {events_ms:.1f} ms by CUDA events read {clock_ms:.1f} ms "
            f"by DeviceClock; its launch alone {launch_ms:.2f} ms{note}"
        ),
        details,
    )


def _cpu_clock_sanity(clock) -> tuple[str, str, dict]:
    """A 50 ms sleep reads about 50 ms, and a thousand reads never go backwards."""
    readings = []
    for _ in range(3):
        t0 = clock.now()
        time.sleep(0.05)
        readings.append((clock.now() - t0) * 1000)
    reads = [clock.now() for _ in range(1000)]
    monotonic = all(b >= a for a, b in zip(reads, reads[1:]))
    ms = statistics.median(readings)
    details = {"sleep_ms": 50, "clock_ms": readings, "monotonic": monotonic}
    ok = monotonic and 49.0 <= ms <= 250.0
    return (
        ("pass" if ok else "fail"),
        f"CPU clock sanity: a 50 ms sleep read {ms:.1f} ms; monotonic: {monotonic}",
        details,
    )


def check_timing_sync_calls(ctx: Context) -> tuple[str, str, dict]:
    """Every clock read preceded by a synchronise; on a CPU the same runs go through (so this cannot rot)."""
    from ...engine.decoding import greedy_generate, speculative_generate
    from ...engine.drafters import ModelDrafter, PromptLookupDrafter
    from ...engine.hf_assisted import hf_assisted_generate

    target, draft = ctx.tiny_copies()
    ids = ctx.repetitive_ids()
    runs = _count_clock_reads({
        "greedy_generate": lambda: greedy_generate(target, ids, 16),
        "speculative_generate (draft model)":
            lambda: speculative_generate(target, ModelDrafter(draft), ids, 4, 16),
        "speculative_generate (prompt lookup)":
            lambda: speculative_generate(target, PromptLookupDrafter(3), ids, 4, 16),
        "hf_assisted_generate": lambda: hf_assisted_generate(target, ModelDrafter(draft), ids, 4, 16),
    })  # fmt: skip
    summary = ", ".join(f"{name}: {c['clock_reads']} reads, {c['reads_without_sync']} bare" for name, c in runs.items())
    if not ctx.cuda:
        unread = [name for name, counts in runs.items() if counts["clock_reads"] < 2]
        if unread:
            return (
                "fail",
                f"the instrumented clock saw no reads in {', '.join(unread)}: {summary}",
                {"runs": runs},
            )
        return (
            "skip",
            f"CUDA only (a CPU has nothing to synchronise); the instrumented CPU runs: {summary}",
            {"runs": runs},
        )
    bad = [name for name, counts in runs.items() if counts["reads_without_sync"] or counts["clock_reads"] < 2]
    return ("fail" if bad else "pass"), summary, {"runs": runs}


def _count_clock_reads(calls: dict[str, Callable[[], object]]) -> dict[str, dict[str, int]]:
    """Per call: the clock reads inside kernels.timing, the synchronises, and the reads not right after one."""
    import torch

    from ...kernels import timing

    events: list[str] = []
    real_synchronize, real_time = torch.cuda.synchronize, timing.time

    def synchronize(*args, **kwargs):
        events.append("sync")
        return real_synchronize(*args, **kwargs)

    class Clock:
        @staticmethod
        def perf_counter() -> float:
            events.append("read")
            return real_time.perf_counter()

    runs = {}
    torch.cuda.synchronize, timing.time = synchronize, Clock
    try:
        for name, call in calls.items():
            events.clear()
            call()
            reads = [i for i, event in enumerate(events) if event == "read"]
            bare = [i for i in reads if i == 0 or events[i - 1] != "sync"]
            runs[name] = {
                "clock_reads": len(reads),
                "synchronises": events.count("sync"),
                "reads_without_sync": len(bare),
            }
    finally:
        torch.cuda.synchronize, timing.time = real_synchronize, real_time
    return runs


def _planter(ctx: Context, per_pass_ms: float) -> tuple[str, Callable[..., None], list[Callable[[], float]]]:
    """A forward hook that plants work after a pass (GPU work on CUDA, a sleep on a CPU), what it plants, and
    the list it fills: per pass, a callable that reads the planted piece's real duration (ms)."""
    planted: list[Callable[[], float]] = []
    if ctx.cuda:
        work = GpuWork(ctx.torch_device)

        def plant(*_) -> None:
            planted.append(work.enqueue_timed(per_pass_ms))

        return f"{work.how} on the GPU, {per_pass_ms:.0f} ms a pass", plant, planted

    def sleep(*_) -> None:
        t0 = time.perf_counter()
        time.sleep(per_pass_ms / 1000)
        took = (time.perf_counter() - t0) * 1000
        planted.append(lambda: took)

    return f"time.sleep, {per_pass_ms:.0f} ms a pass (CPU sanity form)", sleep, planted


def check_timing_sync_decode(ctx: Context) -> tuple[str, str, dict]:
    """A forward hook on the target queues work after every pass (GPU work on CUDA, a sleep on a CPU); each
    planted piece is itself timed (CUDA events; on a CPU the sleep's own clock), and the decode's timings
    must hold the pieces that fall inside them. On CUDA nothing in a greedy decode waits for the GPU between
    its clock reads, so a read without a synchronise would come back early."""
    from ...engine.decoding import greedy_generate, speculative_generate
    from ...engine.drafters import PromptLookupDrafter

    target, _ = ctx.tiny_copies()
    ids = ctx.repetitive_ids()
    per_pass_ms = 20.0 if ctx.cuda else 5.0
    how, plant, planted = _planter(ctx, per_pass_ms)
    handle = target.register_forward_hook(plant)
    try:
        planted.clear()
        greedy = greedy_generate(target, ids, 8).stats
        greedy_work = [piece() for piece in planted]  # the clock's last read synchronised: all recorded
        planted.clear()
        speculative = speculative_generate(target, PromptLookupDrafter(3), ids, 4, 8).stats
        speculative_work = [piece() for piece in planted]
    finally:
        handle.remove()
    checks = {
        "greedy wall": (greedy.wall_time_s * 1000, sum(greedy_work)),
        "greedy prefill": (greedy.prefill_time_s * 1000, greedy_work[0] if greedy_work else 0.0),
        "speculative wall": (speculative.wall_time_s * 1000, sum(speculative_work)),
        "speculative prefill":
            (speculative.prefill_time_s * 1000, speculative_work[0] if speculative_work else 0.0),
        "speculative verify": (speculative.verify_time_s * 1000, sum(speculative_work[1:])),
    }  # fmt: skip
    passes = {
        "greedy": (greedy.target_forward_passes, len(greedy_work)),
        "speculative": (speculative.target_forward_passes, len(speculative_work)),
    }
    short = [name for name, (measured, work_ms) in checks.items() if measured < 0.98 * work_ms - 0.5]
    uncounted = [name for name, (counted, hooked) in passes.items() if counted != hooked or hooked < 2]
    details = {
        "per_pass_ms": per_pass_ms,
        "how": how,
        "passes (counted, hooked)": passes,
        "measured_vs_planted_ms": {name: [round(m, 2), round(w, 2)] for name, (m, w) in checks.items()},
    }
    summary = "; ".join(
        f"{name} {m:.0f} ms {'<' if name in short else '>='} {w:.0f} ms planted" for name, (m, w) in checks.items()
    )
    if uncounted:
        summary += f"; target passes counted by the stats and seen by the hook differ: {passes}"
    return ("fail" if short or uncounted else "pass"), f"{how}: {summary}", details
