"""The tray: its icon and menu (``tray``), the icons per aggregate state (``icons``), what a state
means in words and colours (``status``), what deserves a notification (``notify``) and how it
reaches the desktop (``delivery``). Qt and the engine's views; nothing of the CLI.
"""
