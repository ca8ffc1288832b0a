"""What every typed answer of the report shares: it is a frozen dataclass that the tables, sentences and figures
read by attribute, and :meth:`JsonRecord.to_json` writes it into the run's JSON document as plain built-in types.

The JSON keeps the answers as it always did: an object per answer, its keys in field order, a list for each tuple.
So a field's name is its JSON key, and the order of the fields is the order of the keys in the file.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any


class JsonRecord:
    """Base of a typed answer (each subclass a frozen dataclass), for :meth:`to_json` at the writer's boundary."""

    def to_json(self) -> dict[str, Any]:
        """The answer as the JSON document keeps it: keys in field order, nested answers as objects, tuples as
        lists."""
        return {field.name: plain(getattr(self, field.name)) for field in fields(self)}  # type: ignore[arg-type]


def plain(value: Any) -> Any:
    """``value`` as JSON takes it: a typed answer as its :meth:`JsonRecord.to_json`, a tuple or list item by
    item, anything else as it is."""
    if isinstance(value, JsonRecord):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value
