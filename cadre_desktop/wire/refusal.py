"""A request refused for a reason the wire names: the node's API and the lend API alike.

A refusal carries a stable reason (its ``code``, docs/node-contract.md) and no
status; `wire/http_status.py` gives each reason its HTTP status.
"""

from __future__ import annotations

from cadre_desktop.errors import InputError


class RequestRefused(InputError):
    """A request the node refuses: a wrong secret, a used invitation, a node that is not in
    the state the request needs. `code` is the stable reason (docs/node-contract.md)."""

    code = "refused"
