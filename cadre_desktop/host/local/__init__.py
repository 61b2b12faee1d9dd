"""The local-process driver: nodes as child processes of this computer.

It holds the orchestrator (the ``core.driver.NodeDriver`` for local processes), how a
child is launched (``launch``: the node contract's environment; ``spawner``: its
fork/exec on a worker thread, so a start is awaited), its identity across
host restarts (``handles``: pid plus start time in ``state.json``), every OS call on
processes (``system``: the OS seam, one class per platform, handed down from where
the driver is made), finding what a child left behind (``proctree``), ending it (``teardown``),
its log (``nodelogs``), ports, warm standbys and its own configuration (``config``). It may import the basics and, of
the core, only the seam it implements and what that seam speaks in (``driver``,
``events``, ``jsondoc``); never ``lending``, ``edges``, the node, or the front ends.
"""
