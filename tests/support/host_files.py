"""The host's files as a crash test reads them: each must parse, at the version this build writes."""

from __future__ import annotations

import json

#: What this build writes: records and state are both at version 2.
VERSIONS = {"hosted-nodes.json": 2, "state.json": 2, "grants.json": 1, "donations.json": 1}


def parse_versioned(path) -> dict:
    doc = json.loads(path.read_bytes())
    assert isinstance(doc, dict) and doc.get("version") == VERSIONS[path.name], f"{path.name}: {doc!r}"
    return doc
