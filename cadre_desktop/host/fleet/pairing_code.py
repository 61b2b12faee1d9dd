"""The pairing code: short, typed by a person, valid 10 minutes, single use, a few tries.

A code reads `7-ab3k-9qzp`: a slot (which open invitation, 1-99, no secret) and eight characters of
secret from an alphabet without look-alikes (about 40 bits). The secret never travels: both sides
feed it to SPAKE2 (`pake.py`), so whoever listens learns nothing and whoever guesses gets one guess
a try. An invitation is burnt by its use, by `MAX_TRIES` wrong tries, or by its expiry; what
burnt it is said in words. The book lives in memory only: a code is never written anywhere.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from cadre_desktop.errors import Invalid, InvalidState

ALPHABET = "23456789abcdefghjkmnpqrstuvwxyz"
SECRET_LEN = 8
VALID_S = 600.0
MAX_TRIES = 3
MAX_OPEN = 8


class CodeRefused(InvalidState):
    """A code that is wrong, expired, used or burnt: refused in words, nothing changed."""

    code = "pairing_refused"


@dataclass(frozen=True)
class Code:
    slot: int
    secret: str

    def __str__(self) -> str:
        return f"{self.slot}-{self.secret[:4]}-{self.secret[4:]}"


def parse_code(text: object) -> Code:
    """A code as a person typed it (spaces, capitals and dashes forgiven); Invalid when it is none."""
    if not isinstance(text, str) or len(text) > 40:
        raise Invalid("A pairing code looks like 7-ab3k-9qzp.")
    slot, _, rest = text.strip().lower().partition("-")
    slot, secret = slot.strip(), "".join(ch for ch in rest if ch not in "- ")
    if not slot.isdigit() or not 1 <= int(slot) <= 99 or len(secret) != SECRET_LEN or any(ch not in ALPHABET for ch in secret):
        raise Invalid("A pairing code looks like 7-ab3k-9qzp.")
    return Code(int(slot), secret)


@dataclass
class Invitation:
    code: Code
    expires_at: float  # on the monotonic clock
    expires_wall: str
    tries_left: int = MAX_TRIES
    used: bool = False


class Invitations:
    """The open invitations of this computer, by slot; every question asked with the time now."""

    def __init__(self) -> None:
        self._open: dict[int, Invitation] = {}

    def open(self, now: float, expires_wall: str) -> Invitation:
        self.expire(now)
        if len(self._open) >= MAX_OPEN:
            raise InvalidState(f"{MAX_OPEN} pairing codes are open already; use one or wait for one to expire.")
        free = [slot for slot in range(1, 100) if slot not in self._open]
        code = Code(secrets.choice(free), "".join(secrets.choice(ALPHABET) for _ in range(SECRET_LEN)))
        invitation = self._open[code.slot] = Invitation(code, now + VALID_S, expires_wall)
        return invitation

    def expire(self, now: float) -> None:
        for slot in [s for s, inv in self._open.items() if inv.expires_at <= now or inv.used or inv.tries_left <= 0]:
            del self._open[slot]

    @property
    def any_open(self) -> bool:
        return bool(self._open)

    def take(self, slot: int, now: float) -> Invitation:
        """The invitation a joiner names, for one try; CodeRefused when there is none to try."""
        self.expire(now)
        invitation = self._open.get(slot)
        if invitation is None:
            raise CodeRefused("That pairing code is not open on this computer (wrong, expired, used, "
                              "or burnt by wrong tries). Make a new one with 'cadre-desktop fleet invite'.")
        return invitation

    def wrong(self, invitation: Invitation) -> int:
        """A wrong try: how many are left (at 0 the invitation is burnt)."""
        invitation.tries_left -= 1
        if invitation.tries_left <= 0:
            self._open.pop(invitation.code.slot, None)
        return invitation.tries_left

    def spend(self, invitation: Invitation) -> None:
        invitation.used = True
        self._open.pop(invitation.code.slot, None)
