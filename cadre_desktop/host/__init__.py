"""The engine: everything a host does for its nodes, on one asyncio loop, never Qt.

Four rooms, each a subpackage, imported only downwards: ``core`` (supervision: the
records and their one writer, the decision, the serial queue, the probe, the keyring
gate), ``local`` (the local-process driver behind the ``core.driver`` seam), ``systemd``
(the systemd user unit driver behind the same seam; it imports nothing of ``local``:
``drivers.py`` hands it the port allocator and node logs they share),
``lending`` (grants and lent nodes, a second kind of record on the same core) and
``edges`` (the HTTP servers: the loopback control API and the lend API), and ``fleet``
(the computers of one person, paired by a code, over a mutual-TLS link). The modules
at this level compose them: ``host.py`` builds a `Host` (the object front ends call),
``drivers.py`` picks the driver, ``lend_host.py`` wires lending in, and
``live_settings.py`` applies new settings while running. ``fleetstate`` (the fleet's shared
state on etcd) imports only the local driver's OS seam; ``fleetrun`` wires it into the host
(the supervised etcd member, the store's cache for the views, planned moves) over ``core``,
``fleet`` and ``fleetstate``. Nothing here imports
``cadre_desktop.node``, ``ui`` or ``cli``; what the engine shares with the node is in
``cadre_desktop.wire``.
"""
