"""The fleet's shared state wired into the host (issue 36): the etcd member, the store, the moves.

It holds the supervision of this computer's etcd member and its client (``store``: the member
started once the computer is paired, restarted on a crash with backoff, stopped at quit;
the first pairing makes a cluster, a later one adds the newcomer's member, an unpairing
removes it; every call bounded, never on the host's start), what each node's shared state
says for the views (``store``'s cache: generation, failover, why it is unknown), the portable
state of a node (``bundle``: the work folder's files a node needs, bounded), the planned
move of a node to another computer (``moves``: the steps and their refusals, on fakes in the
unit tests) and what a paired computer may ask of them over the fleet link (``run_api``).

It may import the basics (``errors``, ``text``, ``files``, ``settings``), the supervision
core's records and views (``host/core``), the fleet (``host/fleet``: the computers, the
identity, the link's client) and the fleet's shared state (``host/fleetstate``), and the
local driver's OS seam (``host/local/system``) that the member runs on; nothing of the
edges, the node, the CLI or the UI. ``host/fleet`` and ``host/fleetstate`` never import it.
"""
