"""The kinds of record one supervisor keeps (hosted nodes first, lent nodes when lending is on),
each with its lifecycle and its supervision numbers (`Policy`); which lifecycle holds a node.

One job: the supervisor, the service and the views ask it which kind a node is; nothing here
starts, stops or writes anything.
"""

from __future__ import annotations

from cadre_desktop.host.core.records.lifecycle import AnyLife, Supervised
from cadre_desktop.host.core.supervision.decide import Policy
from cadre_desktop.settings import Settings


class Kinds:
    def __init__(self, hosted: AnyLife, settings: Settings) -> None:
        #: Every kind of record supervised here; the hosted nodes' first.
        self.lifecycles: list[AnyLife] = [hosted]
        self.settings = settings
        #: Per kind of record (by its noun), its supervision numbers.
        self._policies: dict[str, Policy] = {hosted.kind.noun: Policy(hosted.kind.settings(settings))}

    @property
    def hosted(self) -> AnyLife:
        return self.lifecycles[0]

    def watch(self, lifecycle: AnyLife) -> None:
        """Another kind of record, on the same passes, queue and timers."""
        self.lifecycles.append(lifecycle)
        self._policies[lifecycle.kind.noun] = Policy(lifecycle.kind.settings(self.settings))

    def use_settings(self, settings: Settings) -> None:
        """New supervision numbers for every kind of record, from the next decision on."""
        self.settings = settings
        for lc in self.lifecycles:
            self._policies[lc.kind.noun] = Policy(lc.kind.settings(settings))

    def of(self, node_id: str) -> AnyLife:
        """The lifecycle whose store holds this id (the hosted one when none does)."""
        for lc in self.lifecycles[1:]:
            if lc.get(node_id) is not None:
                return lc
        return self.lifecycles[0]

    def policy(self, lc: AnyLife | None = None) -> Policy:
        """A kind's numbers; the hosted nodes' (the sweep's period among them) by default."""
        return self._policies[(lc or self.lifecycles[0]).kind.noun]

    def supervised(self) -> list[tuple[AnyLife, Supervised]]:
        """Every record a pass looks at: supervised or held, of every kind."""
        return [(lc, r) for lc in self.lifecycles for r in lc.rows()
                if r.status in lc.kind.supervised or r.status in lc.kind.held]
