"""Removal survives a failing keyring, without pestering it (in-process, fake orchestrator).

A Remove leaves a tombstone until the node's child, folder and keyring entries
are gone. When the keyring step fails (locked), the node is still gone from the
list, the Remove says why, and the reap sweep does not call the keyring again
(on a desktop each call to a locked keyring may pop up an unlock prompt) until
the keyring has worked once more; then the sweep finishes the job.
"""

from __future__ import annotations

import pytest

from cadre_desktop.errors import SecretsError
from cadre_desktop.host.core.vault.secrets import SERVICE
from tests.support.keyrings import MemoryKeyring
from tests.support.rig import Rig


@pytest.fixture
def rig(tmp_path):
    r = Rig(tmp_path, keyring=MemoryKeyring())
    yield r
    r.secrets.close()


async def test_remove_with_a_locked_keyring_finishes_once_it_works_and_never_nags_it_meanwhile(rig):
    node = await rig.service.add("A")
    rig.keyring.locked = True
    with pytest.raises(SecretsError) as err:
        await rig.service.remove(node.id)
    assert err.value.code == "keyring_locked"
    assert rig.store.get(node.id) is None and rig.orch.removed == [node.id]
    assert rig.store.pending_removals() == [node.id]
    calls = rig.keyring.calls
    for _ in range(3):
        await rig.service.reap_stuck()
    assert rig.keyring.calls == calls, "the sweep kept calling a locked keyring"
    rig.keyring.locked = False
    await rig.service.reap_stuck()
    assert rig.store.pending_removals() == [node.id], "still waiting for proof the keyring works"
    await rig.service.add("B")  # the keyring works again
    await rig.service.reap_stuck()
    assert rig.store.pending_removals() == []
    assert (SERVICE, f"{node.id}/claim-secret") not in rig.keyring.items


async def test_removing_again_finishes_a_removal_the_keyring_blocked(rig):
    node = await rig.service.add("A")
    rig.keyring.locked = True
    with pytest.raises(SecretsError):
        await rig.service.remove(node.id)
    rig.keyring.locked = False
    assert await rig.service.remove(node.id) is False  # already gone from the list: not an error
    assert rig.store.pending_removals() == []
    assert rig.keyring.items == {}


async def test_add_refused_by_the_keyring_leaves_the_records_file_as_it_was(rig):
    await rig.service.add("A")
    before = rig.store.path.read_bytes()
    rig.keyring.locked = True
    with pytest.raises(SecretsError):
        await rig.service.add("B")
    assert rig.store.path.read_bytes() == before
    calls = rig.keyring.calls
    await rig.service.reap_stuck()
    assert rig.keyring.calls == calls
