"""What the host and a node share on the wire: neutral, so neither imports the other.

It holds the seed format a borrower signs (``seed``), keys and signatures as they
travel (``keys``), the bounds and codes every API of the node's format answers with
(``api``), a refusal and its HTTP status (``refusal``, ``http_status``), the
throttle of wrong secrets (``ratelimit``), a node's ``run.json`` (``runfile``: its name,
states and bounds, the node's strict check of a request and the host's check of the file),
a fleet's failover node's generation and lease deadline on the boot clock (``lease``),
and the HTTP/1.1 server both serve their APIs with (``http1`` on h11, its ``Request`` and
``Answer`` in ``httpmsg``). It imports only the
basics (``cadre_desktop.errors``, ``text``, ``netguard``) and h11: nothing of ``host``,
``node``, ``ui`` or ``cli``, and never aiohttp.
"""
