"""Lending in the tray: what it needs at start (``lent_core``), the way to the rest, built when
first shown (``lent_ui``), the Lent tab (``lent``) and the grant dialog (``grant_dialog``). Qt
and the engine's lending; nothing of the CLI.
"""
