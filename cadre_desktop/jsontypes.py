"""JSON as typed values, defined once: what `json.loads` gives and `json.dumps` takes.

`JSONValue` is any JSON document; `JSONObject` an object (a row of a file, a body of an API).
A document read from disk or the wire is parsed by `loads` (bounded in depth: a few kilobytes of
`[` would otherwise raise RecursionError, which no reader expects) and checked by narrowing
(`isinstance`) before a field is used; one built to be written is typed as what it is, so a
non-JSON value is a type error.
"""

from __future__ import annotations

import json
from typing import TypeAlias

JSONScalar: TypeAlias = str | int | float | bool | None
JSONValue: TypeAlias = JSONScalar | list["JSONValue"] | dict[str, "JSONValue"]
JSONObject: TypeAlias = dict[str, JSONValue]

#: The deepest nesting a document read from outside may have (ours are at most 5 deep).
MAX_DEPTH = 32


def loads(raw: bytes | str, *, max_depth: int = MAX_DEPTH) -> JSONValue:
    """`json.loads`, but a document nested deeper than `max_depth` raises ValueError as any
    malformed one does (never RecursionError), so every reader's `except ValueError` holds."""
    try:
        doc: JSONValue = json.loads(raw)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None
    if _depth_over(doc, max_depth):
        raise ValueError(f"the JSON is nested deeper than {max_depth}")
    return doc


def _depth_over(doc: JSONValue, limit: int) -> bool:
    """Whether `doc` nests deeper than `limit` (walked without recursion)."""
    level: list[JSONValue] = [doc]
    depth = 0
    while level:
        inner: list[JSONValue] = []
        for value in level:
            if isinstance(value, dict):
                inner.extend(value.values())
            elif isinstance(value, list):
                inner.extend(value)
        if not inner:
            return False
        depth += 1
        if depth > limit:
            return True
        level = inner
    return False
