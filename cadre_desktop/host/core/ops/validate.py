"""The one place that checks what a person or a client gives the host: names, ids, invitations.

The control API, the service and the UI all use these, so they never disagree
about what is acceptable, and every refusal says what to do instead.
"""

from __future__ import annotations

import re

from cadre_desktop.errors import Invalid, NoSuchThing
from cadre_desktop.host.core.records.records import is_node_id

MAX_NAME = 64
MAX_INVITATION = 4096


def clean_name(name: object, fallback: str | None, what: str = "node name") -> str | None:
    """A node name (or a grant's label): one printable line of 1 to 64 characters, spaces trimmed.

    No name at all gives `fallback`; a blank one too, where there is a fallback.
    """
    if name is None:
        return fallback
    if not isinstance(name, str):
        raise Invalid(f"The {what} must be text.")
    if not name.isprintable():
        raise Invalid(f"The {what} must be one line of printable characters (no tabs or line breaks).")
    text = " ".join(name.split())
    if not text and fallback is not None:
        return fallback
    if not text or len(text) > MAX_NAME:
        raise Invalid(f"The {what} must be 1 to {MAX_NAME} printable characters.")
    return text


def clean_invitation(invitation: object) -> str:
    if not isinstance(invitation, str) or not invitation.strip():
        raise Invalid("The invitation is empty. Paste the invitation text you were given.")
    text = invitation.strip()
    if len(text) > MAX_INVITATION:
        raise Invalid(f"The invitation is longer than {MAX_INVITATION} characters; is it the right text?")
    if re.search(r"\s", text) or not text.isprintable():
        raise Invalid("That does not look like an invitation: it should be one line of text without spaces.")
    return text


def require_node_id(node_id: object) -> str:
    """A node id of this host's form; anything else is simply not one of ours."""
    if not is_node_id(node_id):
        raise NoSuchThing(f"There is no node {str(node_id)[:80]!r} on this host.")
    return str(node_id)
