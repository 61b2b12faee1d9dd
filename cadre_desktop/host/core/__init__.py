"""The supervision core: records, their one writer, the decision and the serial queue.

It holds a node's record and its file (``records``, ``store``, ``rowstore``), the
only writer of records (``lifecycle``), the rules as one pure function (``decide``),
the pass that carries them out on one queue (``supervisor``, ``passes``), the driver
seam (``driver``, a Protocol), the probe that observes running nodes, the keyring
gate, the views, what a person does to a node (``service``) and the host's machine
facts (address, lock, preflight). It may import the basics (``cadre_desktop.*``
modules) and ``cadre_desktop.wire``, nothing of ``local``, ``lending``, ``edges``,
the node, or the front ends: drivers and edges plug into it, not the other way.
"""
