"""The supervision core, in four rooms over the seam at its top.

Its top holds the seam the rooms and the drivers share: the driver Protocol (``driver``),
the event bus and listeners (``events``), the clocks (``clock``, ``timeline``). Below it,
from the bottom up: ``vault`` (secrets and the keyring gate), ``records`` (a node's record,
its file and its one writer, the lifecycle), ``supervision`` (the rules, the pass, the
probe, the holds) and ``ops`` (what a person does, the read model, the address). A room
imports only the rooms before it (``tests/unit/test_layers.py``). The core may import the
basics (``cadre_desktop.*`` modules and rooms) and ``cadre_desktop.wire``, nothing of
``local``, ``lending``, ``edges``, the node, or the front ends: drivers and edges plug into
it, not the other way.
"""
