"""The engine and the node never import Qt (STYLE habit 1)."""

import ast
import os
import sys
from pathlib import Path

from tests.support import syntax
from tests.support.imports import imported, loaded_after, sources

PKG = Path(__file__).parents[2] / "cadre_desktop"


def imported_modules(path: Path) -> set[str]:
    return {module for module, _ in imported(PKG, path)}




def test_host_and_node_sources_never_import_qt_or_ui():
    for layer in ("host", "node", "wire"):
        for path in sources(layer):
            for name in imported_modules(path):
                assert not name.startswith(("PySide6", "qasync", "cadre_desktop.ui")), f"{path} imports {name}"


def test_node_never_imports_the_host():
    for path in sources("node"):
        for name in imported_modules(path):
            assert not name.startswith("cadre_desktop.host"), f"{path} imports {name}"


def test_the_engine_never_imports_the_node():
    """What both sides of a wire share is in wire/, which belongs to neither."""
    for path in sources("host"):
        for name in imported_modules(path):
            assert not name.startswith("cadre_desktop.node"), f"{path} imports {name}"


def test_the_wire_format_imports_only_the_basics():
    for path in sources("wire"):
        for name in imported_modules(path):
            assert not name.startswith(("cadre_desktop.host", "cadre_desktop.node", "cadre_desktop.ui",
                                        "cadre_desktop.cli", "aiohttp")), f"{path} imports {name}"


#: What each room of the engine may import of the others (host/__init__.py and each room's docstring say why).
ROOMS = {
    "host/core": set(),
    "host/local": {"cadre_desktop.host.core.driver", "cadre_desktop.host.core.events", "cadre_desktop.host.core.records.jsondoc"},
    "host/systemd": {"cadre_desktop.host.core.driver", "cadre_desktop.host.core.events", "cadre_desktop.host.core.records.jsondoc"},
    "host/lending": {"cadre_desktop.host.core"},
    "host/edges": {"cadre_desktop.host.core", "cadre_desktop.host.lending", "cadre_desktop.host.fleet"},
    "host/fleet": {"cadre_desktop.host.core"},
    "host/conditions": {"cadre_desktop.host.core"},
    "host/fleetstate": {"cadre_desktop.host.local.system"},
    "host/fleetrun": {"cadre_desktop.host.core", "cadre_desktop.host.fleet", "cadre_desktop.host.fleetstate",
                      "cadre_desktop.host.local.system"},
}


def room_violations(pkg: Path) -> list[str]:
    """Run-time imports across the engine's rooms that ROOMS does not allow. An edge may name the
    Host it serves in an annotation (under TYPE_CHECKING): a type, not a dependency, and the
    import graph test keeps it free of cycles."""
    found = []
    for room, allowed in ROOMS.items():
        own = "cadre_desktop." + room.replace("/", ".")
        paths = sorted((pkg / room).rglob("*.py"))
        assert paths, f"{pkg / room} holds no module: the check would walk nothing"
        for path in paths:
            for name in {module for module, _ in imported(pkg, path, running_only=True)}:
                if not name.startswith("cadre_desktop.host.") or name == own or name.startswith(own + "."):
                    continue
                if not any(name == a or name.startswith(a + ".") for a in allowed):
                    found.append(f"{path.relative_to(pkg)} imports {name}")
    return found


def test_each_room_of_the_engine_imports_only_the_rooms_below_it():
    assert room_violations(PKG) == []


def test_the_room_check_sees_a_planted_upward_import(tmp_path):
    pkg = tmp_path / "cadre_desktop"
    for room in ROOMS:
        (pkg / room).mkdir(parents=True)
        (pkg / room / "__init__.py").write_text("")
    (pkg / "host/core/planted.py").write_text("from cadre_desktop.host.local import orchestrator\n")
    (pkg / "host/edges/typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cadre_desktop.host.host import Host\n")
    assert room_violations(pkg) == ["host/core/planted.py imports cadre_desktop.host.local"]


def test_a_room_whose_name_starts_another_is_not_taken_for_it(tmp_path):
    """`host/fleet` importing `host/fleetstate` is a crossing, not an import of its own room."""
    pkg = tmp_path / "cadre_desktop"
    for room in ROOMS:
        (pkg / room).mkdir(parents=True)
        (pkg / room / "__init__.py").write_text("")
    (pkg / "host/fleet/planted.py").write_text("from cadre_desktop.host.fleetstate import shared\n")
    assert room_violations(pkg) == ["host/fleet/planted.py imports cadre_desktop.host.fleetstate"]


def test_every_room_says_what_it_holds_and_may_import():
    rooms = [p for p in (PKG / "host").iterdir() if p.is_dir() and p.name != "__pycache__"] + [PKG / "wire"]
    assert {p.name for p in rooms} >= {"core", "local", "lending", "edges", "conditions", "wire"}
    for room in rooms:
        doc = ast.get_docstring(syntax.parse((room / "__init__.py").read_text()))
        assert doc and "import" in doc and len(doc) > 200, f"{room}/__init__.py wants a docstring: what it holds and may import"


def test_importing_the_engine_loads_no_qt():
    script = (
        "import pkgutil, importlib, cadre_desktop.host as h, cadre_desktop.node as n\n"
        "for pkg in (h, n):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if not m.name.endswith('__main__'): importlib.import_module(m.name)\n"
    )
    assert loaded_after(script, ("PySide6", "qasync")) == []


def test_the_host_loads_no_grpc_aetcd_or_cryptography_until_a_fleet_store_is_asked():
    """A host in no fleet (most): the fleet's etcd client (gRPC, about 12 MB) and `cryptography`
    load with the first store client or certificate, never with the Host (seen: they did, once the
    fleet's store was wired in)."""
    assert loaded_after("import cadre_desktop.host.host", ("grpc", "aetcd", "cryptography")) == []


def test_the_engine_loads_no_aiohttp():
    """The control API and the lend API serve on wire/http1.py (h11), and the probe, invitations
    and seeds ask with httpclient.py: importing every module of host/, wire/ and the basics
    loads no aiohttp (it cost the tray about 17 MB; it is a test dependency only)."""
    script = (
        "import pkgutil, importlib, cadre_desktop, cadre_desktop.host as h, cadre_desktop.wire as w\n"
        "for pkg in (h, w):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'): importlib.import_module(m.name)\n"
        "for m in pkgutil.iter_modules(cadre_desktop.__path__):\n"
        "    if not m.ispkg and m.name != '__main__': importlib.import_module('cadre_desktop.' + m.name)\n"
    )
    assert loaded_after(script, ("aiohttp", "yarl", "multidict")) == []


def test_the_tray_app_and_the_headless_host_load_no_tls():
    """What `cadre-desktop` and `--headless` import to start (the CLI, the engine, the tray's UI)
    loads no ``ssl`` and no ``_hashlib`` once asyncio and hashlib came without them (plainasync):
    OpenSSL is about 8 MB of the tray.
    The CLI's urllib client, which brings ssl, is built only when a command asks the host."""
    script = (
        "from cadre_desktop.net.plainasync import import_without_openssl\n"
        "assert import_without_openssl()\n"
        "import cadre_desktop.cli, cadre_desktop.cli.start, cadre_desktop.cli.headless, cadre_desktop.host.host, cadre_desktop.ui.app\n"
        "import cadre_desktop.ui.shell, cadre_desktop.ui.tray.tray, cadre_desktop.host.lend_host, qasync\n"
    )
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    assert loaded_after(script, ("ssl", "_ssl", "_hashlib", "urllib.request", "http"), env) == []


#: Modules both the node and the host may import (the node imports nothing from host/).
SHARED = ("text.py", "net/netguard.py", "logs/logfilter.py", "net/fdlimit.py", "logs/logpump.py", "logs/logkeeper.py", "files/atomicfile.py",
          "errors.py", "net/httpclient.py", "net/plainasync.py")


def test_shared_modules_import_neither_host_nor_node_nor_ui():
    for name in SHARED:
        for module in imported_modules(PKG / name):
            assert not module.startswith(("cadre_desktop.host", "cadre_desktop.node", "cadre_desktop.ui",
                                          "PySide6", "qasync")), f"{name} imports {module}"


def test_node_imports_only_itself_and_the_shared_modules():
    allowed = {"cadre_desktop." + name[:-3].replace("/", ".") for name in SHARED} | {"cadre_desktop"}
    for path in sources("node"):
        for base, item in imported(PKG, path):
            # `from cadre_desktop.net import plainasync` imports the module cadre_desktop.net.plainasync
            module = f"{base}.{item}" if item and f"{base}.{item}" in allowed else base
            if module.startswith("cadre_desktop") and not module.startswith(("cadre_desktop.node", "cadre_desktop.wire")):
                assert module in allowed, f"{path} imports {module}"


def test_the_log_pump_needs_only_the_standard_library():
    # It runs as `python -I -S logpump.py`: no site-packages, not even our own package.
    for module in imported_modules(PKG / "logs/logpump.py"):
        assert module.split(".")[0] in sys.stdlib_module_names or module == "__future__", module


def test_the_log_keeper_needs_only_the_standard_library_and_the_pump():
    # It runs as `python -I -S logkeeper.py`: its one neighbour is logpump.py, found beside it.
    modules = imported_modules(PKG / "logs/logkeeper.py")
    assert "cadre_desktop.logs.logpump" in modules
    for module in modules - {"cadre_desktop.logs.logpump", "logpump"}:
        assert module.split(".")[0] in sys.stdlib_module_names or module == "__future__", module


def test_nothing_but_the_lifecycle_writes_a_record():
    """One owner of a node's life: the store's writers (hosted or lent nodes) are called from lifecycle.py only."""
    writers = ("put", "remove", "mark_removed", "removal_done")
    for path in sources("host"):
        if path.name in ("lifecycle.py", "store.py"):
            continue
        for node in ast.walk(syntax.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in writers
                    and isinstance(node.func.value, ast.Attribute) and node.func.value.attr in ("store", "donations")):
                raise AssertionError(f"{path.name}:{node.lineno} writes a record with store.{node.func.attr}")


def test_the_engine_speaks_to_compute_only_through_the_driver_seam():
    for path in sources("host/core") + sources("host/lending"):
        imports = imported_modules(path)
        assert "subprocess" not in imports, path
        assert not any(m.startswith("cadre_desktop.host.local") for m in imports), path


#: The basics' rooms beside the package's top-level modules: files, logs, the keyring's calls, the network.
BASICS_ROOMS = ("files", "logs", "keyrings", "net")


def test_shared_basics_at_the_top_level_import_no_layer_above_them():
    """The package's top level holds the basics every layer shares (paths, settings,
    errors, atomic files, text, logging set-up, autostart): none of them reaches up into
    the engine, the node, a front end or Qt."""
    above = ("cadre_desktop.host", "cadre_desktop.node", "cadre_desktop.ui", "cadre_desktop.cli",
             "PySide6", "qasync")
    basics = [p for p in sources(pattern="*.py") if p.name not in ("__main__.py",)]
    basics += [p for room in BASICS_ROOMS for p in sources(room)]
    assert len(basics) >= 20
    for path in basics:
        for module in imported_modules(path):
            assert not module.startswith(above), f"{path.name} imports {module}"


def test_the_engine_never_imports_a_front_end():
    for path in sources("host"):
        for module in imported_modules(path):
            assert not module.startswith(("cadre_desktop.cli", "cadre_desktop.ui")), f"{path} imports {module}"


def test_the_command_line_front_ends_load_no_qt():
    """The CLI, doctor and the headless host stay light: Qt is loaded only when the one
    executable's dispatcher is asked for the tray (or doctor's display probe, which runs
    in a child of its own)."""
    script = (
        "import pkgutil, importlib, cadre_desktop.cli as c\n"
        "for m in pkgutil.walk_packages(c.__path__, c.__name__ + '.'): importlib.import_module(m.name)\n"
    )
    assert loaded_after(script, ("PySide6", "qasync", "cadre_desktop.ui")) == []


# -- who starts and stops children ------------------------------------------------------------

#: The only places outside the driver that start or stop a child, each for a reason. Everything
#: in the supervisor runs on its serial queue (passes, and the service's `work` closures it runs);
#: creating a record owns it before any pass sees it; Remove must win against a long pass and
#: re-reads; a Quit stops what is left after the supervisor stopped.
CHILD_EFFECTS_ALLOWED = {
    ("host/core/supervision/supervisor.py", "*"),
    ("host/core/supervision/starts.py", "*"),  # the one start of a node (`Starter.start`), on the supervisor's queue
    ("host/core/ops/service.py", "work"),  # Retry, Restart, Resume: run by supervisor.serialize
    ("host/core/ops/provision.py", "create"),  # a first start: the row is in its kind's creating status, no pass touches it
    ("host/core/ops/service.py", "_clean_up_removed"),  # Remove: the record is gone first
    ("host/core/ops/service.py", "reclaim_orphan"),  # no record names it: no pass touches it
    ("host/lending/service.py", "clean_up"),  # ending a loan: the row is gone first, as at Remove
    ("host/host.py", "_teardown"),
}
_EFFECTS = {"start", "stop", "stop_node", "stop_all", "remove_node", "launch"}


def _child_effects(path) -> list[tuple[str, int]]:
    """(enclosing function, line) of every `<x>.driver.<effect>(…)` and `<x>.launch(…)` call."""
    found = []

    def walk(node, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr in _EFFECTS:
                target = child.func.value
                on_driver = isinstance(target, ast.Attribute) and target.attr == "driver" or (
                    isinstance(target, ast.Name) and target.id == "driver")
                if on_driver or child.func.attr == "launch" and ast.unparse(target).endswith("supervisor"):
                    found.append((func, child.lineno))
            walk(child, name)
    walk(syntax.parse(path.read_text()), "")
    return found


def test_nothing_but_the_supervisors_queue_starts_or_stops_a_child():
    strays = []
    for path in sources("host") + sources("ui") + sources("cli"):
        name = path.relative_to(PKG).as_posix()
        if name.startswith("host/local/"):
            continue  # the local driver itself
        for func, line in _child_effects(path):
            if (name, "*") not in CHILD_EFFECTS_ALLOWED and (name, func) not in CHILD_EFFECTS_ALLOWED:
                strays.append(f"{name}:{line} in {func or 'module'}")
    assert not strays, "a child is started or stopped outside the supervisor's serial queue"


def test_the_check_of_child_effects_finds_a_stop_outside_the_queue(tmp_path):
    planted = tmp_path / "probe.py"
    planted.write_text("class P:\n    def _stop_later(self, h):\n        return self.driver.stop(h)\n")
    assert _child_effects(planted) == [("_stop_later", 3)]


#: The core's rooms from the bottom up: each may import its own and those before it (the seam
#: at the core's top is before all of them).
CORE_ROOMS = ("host/core", "host/core/vault", "host/core/records", "host/core/supervision", "host/core/ops")


def core_room_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[:3] != ["cadre_desktop", "host", "core"]:
        return None
    inner = "host/core/" + parts[3] if len(parts) > 4 else ""
    return inner if inner in CORE_ROOMS else "host/core"


def core_room_violations(pkg: Path) -> list[str]:
    """Imports, type-only ones too, from a room of the core to a room above it."""
    found = []
    for path in sorted((pkg / "host" / "core").rglob("*.py")):
        here = core_room_of("cadre_desktop." + ".".join(path.relative_to(pkg).with_suffix("").parts))
        assert here is not None
        for base, item in imported(pkg, path):
            there = core_room_of(f"{base}.{item}" if item else base)
            if there is not None and CORE_ROOMS.index(there) > CORE_ROOMS.index(here):
                found.append(f"{path.relative_to(pkg)} imports {base}")
    return found


def test_each_room_of_the_core_imports_only_the_rooms_below_it():
    assert core_room_violations(PKG) == []


def test_the_core_room_check_sees_a_planted_upward_import(tmp_path):
    pkg = tmp_path / "cadre_desktop"
    for room in CORE_ROOMS:
        (pkg / room).mkdir(parents=True, exist_ok=True)
        (pkg / room / "__init__.py").write_text("")
    (pkg / "host/core/records/planted.py").write_text("from cadre_desktop.host.core.ops.views import NodeView\n")
    (pkg / "host/core/ops/fine.py").write_text("from cadre_desktop.host.core.records import lifecycle\n")
    assert core_room_violations(pkg) == ["host/core/records/planted.py imports cadre_desktop.host.core.ops.views"]
