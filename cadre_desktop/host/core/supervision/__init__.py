"""Supervision: the rules as one pure function (``decide``), what a pass sees of a node
(``observe``), the pass on one serial queue and its start of a node (``supervisor``,
``starts``), when passes run (``passes``), the start gate (``gate``), holds of a node and of the
host (``holds``, ``host_holds``, ``runfile``: a node's own ``run.json``), an exit in words
(``exits``), the probe of running nodes (``probe``) and children no record names (``orphans``).
It may import the basics, ``wire``, the core's seam, ``records`` and ``vault``, never ``ops``,
another room of ``host/`` or a front end.
"""
