"""Secrets: each node's claim secret read ahead and kept in memory (``keyring_gate``: a locked or
hung keyring makes nodes wait, never fail) over the keyring's calls on one daemon thread
(``secrets``, through the keyring helper on Linux). It may import the basics, ``keyrings`` and
the core's seam (``events``, ``clock``), nothing of ``records``, ``supervision`` or ``ops``.
"""
