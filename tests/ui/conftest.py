"""The UI tests' fixtures: a real in-process Host and Shell on offscreen Qt (tests/support/ui_shell.py)."""

from tests.support.ui_shell import aio, home, host, keyring_env, qloop, settings_doc, shell  # noqa: F401
