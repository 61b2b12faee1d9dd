"""The keyring's calls in three parts: what every side shares without the keyring library
(``keyring_names``: entry names, ``SecretKind``, the errors, the ``KeyringCalls`` Protocol), the
calls against a backend in this process (``keyring_calls``, the one module that imports
``keyring``), and the keyring helper child process (``keyring_helper``). Basics: they import the
standard library, ``keyring`` and the other basics, never the engine, the node or a front end.
"""
