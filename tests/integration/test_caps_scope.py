"""The systemd user scope over a real D-Bus: the caps' calls (host/local/limits/scope.py) against a
fake user manager on a private session bus."""

from __future__ import annotations

from cadre_desktop.host.core.driver import NodeCaps
from cadre_desktop.host.local.limits import caps, scope
from cadre_desktop.host.local.system.linux import LinuxOS
from tests.support.fake_systemd import serve_manager
from tests.support.polling import async_wait_until


async def test_a_capped_start_asks_the_user_manager_for_a_scope_and_remove_stops_it(secret_service):
    address = secret_service["DBUS_SESSION_BUS_ADDRESS"]
    bus, manager = await serve_manager(address)
    try:
        way = caps.choose(LinuxOS(), "habc", scope_address=lambda: address)
        keeper = caps.CapsKeeper(way, lambda _n: NodeCaps(cpu_percent=20, memory_mb=256, low_priority=False),
                                 system=LinuxOS())
        child = type("Child", (), {"id": "n1.h1", "node_id": "n1", "pid": 4242, "_job_handle": None})()
        keeper.place(child)
        await async_wait_until(lambda: manager.started, what="StartTransientUnit")
        name, mode, props = manager.started[0]
        assert (name, mode) == ("cadre-desktop-habc-n1-4242.scope", "fail")
        assert props["PIDs"] == [4242]
        assert props["MemoryMax"] == 256 << 20 and props["MemorySwapMax"] == 0
        assert props["CPUQuotaPerSecUSec"] == 200_000
        assert props["CollectMode"] == "inactive-or-failed"
        assert keeper.enforcement(NodeCaps(20, 256)).how == "systemd user scope"
        await keeper.forget("n1")
        assert manager.stopped == [name]
        await keeper.clear()  # nothing more to stop: no error
    finally:
        bus.disconnect()


async def test_a_refusal_or_an_unknown_unit_is_an_error_the_caps_survive(secret_service):
    address = secret_service["DBUS_SESSION_BUS_ADDRESS"]
    bus, manager = await serve_manager(address)
    try:
        ops = scope.ScopeOps(address)
        manager.refuse = True
        try:
            await ops.start("cadre-desktop-h-n-1.scope", scope.scope_properties("n", 1, NodeCaps(memory_mb=64)))
        except OSError as exc:
            assert "AccessDenied" in str(exc)
        else:
            raise AssertionError("a refused scope must raise")
        try:
            await ops.stop("never-started.scope")
        except OSError as exc:
            assert "NoSuchUnit" in str(exc)
        else:
            raise AssertionError("stopping an unknown unit must raise")
        scopes = scope.Scopes(ops, "cadre-desktop-h")
        scopes.units["n"] = "never-started.scope"
        await scopes.remove("n")  # gone already: logged, not raised
        assert scopes.units == {}
    finally:
        bus.disconnect()
