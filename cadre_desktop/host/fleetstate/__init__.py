"""The fleet's shared state on etcd (issue 36's foundation), not yet wired to the host.

It holds the etcd member a computer runs (``member``: its command line, its process, its
data folder under the home, joining and leaving a cluster; ``datadir``: a data folder's
check, so a corrupt one is reported and never re-created; ``tls``: the peer and client
certificates made from the computer's own key), the bounded client over ``aetcd``
(``client``: every call with a deadline, failures as the package's errors; ``leases``: a
computer's lease and its keep-alive task, and the boot-clock deadline a node is given),
the shared state on it (``shared``: each node's holder, generation and start mark, each
computer's lease, and ``take``, one transaction), and the take-over decision (``takeover``:
a pure decision table on an injected clock, seed 003's rules across computers).

It may import the basics (``errors``, ``text``, ``files``), ``wire`` (the node's lease
contract) and the local driver's OS seam (``host/local/system``: the member is started in
a group of its own and ended terminate → grace → kill, as a node is); nothing of the
supervision core, the fleet link (``host/fleet``), the edges, the node, the CLI or the UI.
"""
