"""The node among its cadre: its claim page (``claim_page``), inviting (``invitations``,
``invitation_code``), joining (``joiner``, ``client``), donated mode (``donated``), the
reference borrower (``borrow``) and its own ``run.json`` asked for over the host-token API
(``run_request``). It may import the node's own modules, ``wire`` and the basics, never
``host/`` or a front end.
"""
