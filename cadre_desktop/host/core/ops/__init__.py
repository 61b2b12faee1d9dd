"""What a person does and what the engine reads: add, join, retry, restart, regenerate, remove
(``service``) over one provisioning protocol (``provision``), inviting with the host's
credential (``invite``), a node's caps and the checks of what a person gives (``caps``,
``validate``), the read model every front end shows (``views``), each node's history
(``history``) and the advertised address and its watcher (``address``, ``netwatch``). It may
import every other room of the core and the basics, never ``local``, ``lending``, ``edges`` or a
front end.
"""
