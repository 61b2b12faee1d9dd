"""The node window: the window itself (``window``), its table model and view (``model``,
``table``; in a fleet, a group of rows per computer and its header's words: ``computers``), the
details pane and its words (``details``, ``explain``), a node's log followed
live (``logview``), its history strip (``history_strip``) and the claim QR dialog (``qr``). Qt
and the engine's views; nothing of the CLI.
"""
