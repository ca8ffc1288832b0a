"""The verify-curve tool: a target's verify-cost curve v(m) per dtype and kernel form (what it measures and how
to run it: :mod:`.command`).

In parts: ``command`` (the command line and the run's course), ``measure`` (loading and timing; the
only module that imports torch), ``curve`` (the rows, their table, the engine's forms in words).
"""

from .command import add_parser

__all__ = ["add_parser"]
