"""JSON as typed values, defined once: what `json.loads` gives and `json.dumps` takes.

`JSONValue` is any JSON document; `JSONObject` an object (a row of a file, a body of an API).
A document read from disk or the wire is checked by narrowing (`isinstance`) before a field is
used; one built to be written is typed as what it is, so a non-JSON value is a type error.
"""

from __future__ import annotations

from typing import TypeAlias

JSONScalar: TypeAlias = str | int | float | bool | None
JSONValue: TypeAlias = JSONScalar | list["JSONValue"] | dict[str, "JSONValue"]
JSONObject: TypeAlias = dict[str, JSONValue]
