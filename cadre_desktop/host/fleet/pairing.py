"""The pairing exchange carried over a connection: the joiner's call and the inviter's answer.

The joiner opens TLS 1.3 to the inviter's fleet port showing no certificate (it has no pin yet;
the code authenticates instead), runs `pake.JoinerSession` frame by frame, and checks that the
certificate the inviter sealed under the code's key is the one its TLS server showed. The
inviter runs `pake.InviterSession` on such a connection (`link.LinkServer` hands it over). SPAKE2
is pure Python (tens of ms): its steps run on a thread, never on the event loop. A refusal goes
to the other side in words and to the log once, without the code.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from cadre_desktop.errors import CadreError
from cadre_desktop.host.fleet.computers import fingerprint, split_address
from cadre_desktop.host.fleet.identity import client_context
from cadre_desktop.host.fleet.link import read_frame, write_frame
from cadre_desktop.host.fleet.pairing_code import Code, CodeRefused, Invitations
from cadre_desktop.host.fleet.pake import InviterSession, JoinerSession, PairingBroken
from cadre_desktop.host.fleet.peers import LinkDown

log = logging.getLogger(__name__)

CONNECT_S = 10.0


async def join(code: Code, address: str, ours: dict[str, Any]) -> dict[str, Any]:
    """Pair with the computer at `address` by `code`; the inviter's sealed identity document."""
    host, port = split_address(address)
    try:
        async with asyncio.timeout(CONNECT_S):
            reader, writer = await asyncio.open_connection(host, port, ssl=client_context(None, None), server_hostname="")
    except (OSError, TimeoutError) as exc:
        raise LinkDown(f"No computer answered at {address} ({type(exc).__name__}); is its fleet invite open?") from None
    try:
        return await _joiner(reader, writer, code, ours)
    except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
        if isinstance(exc, CadreError):
            raise
        raise PairingBroken(f"The other computer ended the pairing ({type(exc).__name__}): the code may be "
                            "wrong, used or expired.") from None
    finally:
        writer.close()


async def _joiner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, code: Code,
                  ours: dict[str, Any]) -> dict[str, Any]:
    session = await asyncio.to_thread(JoinerSession, code, ours)
    await write_frame(writer, await asyncio.to_thread(session.hello))
    sealed = await asyncio.to_thread(session.on_pake, await read_frame(reader))
    await write_frame(writer, sealed)
    theirs, confirm = session.on_sealed(await read_frame(reader))
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    cert = theirs.get("cert")
    if not isinstance(cert, str) or der is None or fingerprint(cert) != "sha256:" + hashlib.sha256(der).hexdigest():
        raise PairingBroken("The other computer's sealed key is not the one its connection showed; not paired.")
    await write_frame(writer, confirm)
    done = await read_frame(reader)
    if done.get("t") != "paired":
        raise CodeRefused(str(done.get("message", "The other computer did not complete the pairing."))[:300])
    return theirs


Pin = Callable[[dict[str, Any], str], Awaitable[dict[str, Any]]]


async def answer_joiner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, where: str,
                        invitations: Invitations, now: float, identity: Callable[[], dict[str, Any]],
                        pin: Pin) -> None:
    """One try of a joiner: the code checked by SPAKE2, the joiner pinned by `pin` once it confirmed.
    `pin` returns the identity document to send (ours and the computers we introduce)."""
    session = InviterSession(invitations, now)
    try:
        await write_frame(writer, await asyncio.to_thread(session.on_hello, await read_frame(reader)))
        theirs = session.on_identity(await read_frame(reader))
        await write_frame(writer, session.answer(identity()))
        await asyncio.to_thread(session.on_confirm, await read_frame(reader))
        pinned = await pin(theirs, where)
        await write_frame(writer, {"t": "paired"})
        log.info("fleet: paired with %s (%s) from %s", pinned.get("name"), pinned.get("id"), where)
    except CadreError as exc:
        log.warning("fleet link: refused a pairing try from %s: %s", where, exc.message)
        try:
            await write_frame(writer, {"t": "refused", "message": exc.message})
        except (OSError, TimeoutError):
            pass
