"""The fleet: the computers of one person, paired by a short code, each seeing and acting on the others' nodes.

It holds this computer's identity (a key pair whose private half lives only in the OS keyring, and a
self-signed certificate made from it: `identity.py`), the paired computers (`fleet.json`,
`computers.py`), the pairing code and its bounds (`pairing_code.py`), the PAKE exchange that pairs two
computers by that code (`pake.py`, sans-IO; `pairing.py` carries it over a connection), the fleet
link (mutual TLS 1.3 between pinned keys: `link.py` serves it, `peers.py` asks it and keeps each
peer's reachability, and `load.py` how busy each says it is), and `fleet.py`, the service the Host, the control API and the CLI use.

It may import the core (`cadre_desktop.host.core`: its clock, events, the versioned file reader, the
secret store) and the basics; never the local driver, lending, the edges or a front end. `ssl` and
`cryptography` are imported only once this computer is in a fleet or invites (the tray and the
headless host load no OpenSSL otherwise: `net/plainasync.py`).
"""
