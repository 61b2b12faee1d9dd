"""The systemd driver: each node a transient unit of the person's systemd user manager.

It holds the driver (``driver``: the ``core.driver.NodeDriver`` for units), its one
connection to the user manager's bus (``bus``: every D-Bus call, bounded, and the
``PropertiesChanged`` signals exits are told from), what a unit is called and what it is
started with (``units``: names, properties, exit codes, pure), one unit's row
(``instances``), the clean-quit list it keeps (``quitlist``), the memory cap's kill on
cgroup v1 (``oomwatch``) and what doctor says of the manager and lingering (``checks``).
Secrets reach a node on its stdin, a pipe the host writes and hands over as a file
descriptor, never in a unit's properties. It may import the basics and, of the core, only
the seam it implements and what that seam speaks in (``driver``, ``events``, ``jsondoc``);
never ``local``, ``lending``, ``edges``, the node, or the front ends: what it shares with
the local driver (ports, the node logs) is handed to it by ``host/drivers.py``.
"""
