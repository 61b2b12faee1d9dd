"""Lending: grants that let another cadre ask this host for nodes, and the lent nodes.

It holds grants (``grants``), lent nodes' records (``donations``), what an owner and a
borrower may do (``service``), a lent node as a second kind of record on the core's
lifecycle and supervisor (``kind``), the reaper of half-done or stale loans and the
views of both. It may import the basics, ``cadre_desktop.wire`` (the seed format) and
the core; never ``local``, ``edges``, the node, or the front ends. The HTTP side of
lending (the lend API, the owner's routes) is in ``edges``.
"""
