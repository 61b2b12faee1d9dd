"""The reference cadre node: the program the host runs for each hosted node.

It is also the executable form of the node contract (see ``docs/node-contract.md``):
anyone writing another node program can read this package to see what the host
expects. It imports nothing from ``cadre_desktop.host`` or ``cadre_desktop.ui`` and
never Qt, so a host can run many of these cheaply.

Importing this package is deliberately free of side effects and heavy imports; the
program starts in :mod:`cadre_desktop.node.__main__`.
"""
