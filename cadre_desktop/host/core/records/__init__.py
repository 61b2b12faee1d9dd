"""Records and their storage: a node's record (``records``), ``hosted-nodes.json`` (``store``) over
one versioned JSON file of rows (``rowstore``, ``jsondoc``), the only writer of records
(``lifecycle``: the transition table and ``Lifecycle.apply``), one host per home (``lock``) and
the checks before a host starts (``preflight``). It may import the basics, ``wire``, the core's
seam (``driver``, ``events``, ``clock``, ``timeline``) and ``vault``'s names, never
``supervision``, ``ops``, another room of ``host/`` or a front end.
"""
