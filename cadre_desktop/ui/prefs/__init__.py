"""Preferences: the General page (``preferences``), the When to run page (``when_prefs``), the
default caps box (``caps_prefs``) and the small questions every dialog shares (``dialogs``). Qt
and the settings; nothing of the CLI.
"""
