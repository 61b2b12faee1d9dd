"""What the supervisor knows of each node's last exit, until the node's next start.

The words ("exited with code 3: <its last line>", "never answered within 15 s")
explain a node that is down, become the next start mark's `last_exit`, and
give a give-up its reason; the code decides whether retrying can help.
"""

from __future__ import annotations

from typing import Callable


class ExitBook:
    def __init__(self) -> None:
        self._words: dict[str, str] = {}
        self._codes: dict[str, int | None] = {}
        #: Per dead child whose exit no event reported, the words read from its log.
        self._unseen: dict[str, str] = {}

    def seen(self, node_id: str, words: str, code: int | None) -> None:
        """A child ended on its own."""
        self._words[node_id] = words
        self._codes[node_id] = code

    def stopped(self, node_id: str, reason: str) -> None:
        """The host stopped a child for a reason of its own (it never answered, it hung)."""
        self._words[node_id] = reason
        self._codes.pop(node_id, None)

    def words(self, node_id: str) -> str | None:
        return self._words.get(node_id)

    def code(self, node_id: str, default: int | None = None) -> int | None:
        return self._codes.get(node_id, default)

    def unseen(self, handle_id: str, read: Callable[[], str]) -> str:
        """The words of a child that died unseen (the host was down): read once per child."""
        words = self._unseen.get(handle_id)
        if words is None:
            words = self._unseen[handle_id] = read()
        return words

    def take_for_start(self, node_id: str, old_handle: str | None) -> str | None:
        """A start begins: the words it follows go into its mark, and the book is cleared."""
        self._unseen.pop(old_handle or "", None)
        self._codes.pop(node_id, None)
        return self._words.pop(node_id, None)

    def forget(self, node_id: str) -> None:
        """A deliberate start begins with a clean slate: the last exit explains nothing."""
        self._words.pop(node_id, None)
        self._codes.pop(node_id, None)
