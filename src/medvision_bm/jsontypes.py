"""The type of a JSON value as the suite decodes and writes it: one alias every record, reader and writer names
instead of ``Any``.

``json.loads`` gives a ``JsonValue``; a reader narrows it to the shape it expects with the typed readers of
``medvision_bm.limits`` (``object_field``, ``list_field``, ``int_field``, ...), which refuse any other shape in one
line naming the field. A value only passed through (copied, hashed, written back) stays a ``JsonValue``; a mapping
taken read-only from a caller is a ``JsonMapping`` (any ``dict[str, X]`` is one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

JsonScalar: TypeAlias = bool | int | float | str | None
JsonValue: TypeAlias = "JsonScalar | list[JsonValue] | dict[str, JsonValue]"
JsonObject: TypeAlias = "dict[str, JsonValue]"
JsonMapping: TypeAlias = Mapping[str, object]
