import errno
import socket

import pytest

from cadre_desktop.errors import OutOfDescriptors, PortsExhausted
from cadre_desktop.host.local.ports import PortAllocator, port_is_free


def test_allocates_lowest_free_ports_and_releases_them():
    alloc = PortAllocator(100, 105, is_free=lambda h, p: True)
    assert alloc.allocate(2) == [100, 101]
    assert alloc.allocate(2) == [102, 103]
    alloc.release([100, 101])
    assert alloc.allocate(2) == [100, 101]


def test_port_held_by_something_else_is_skipped():
    taken = {100, 102}
    alloc = PortAllocator(100, 105, is_free=lambda h, p: p not in taken)
    assert alloc.allocate(2) == [101, 103]


def test_exhaustion_is_a_clear_error_and_reserves_nothing():
    alloc = PortAllocator(100, 102, is_free=lambda h, p: True)
    alloc.allocate(2)
    with pytest.raises(PortsExhausted) as err:
        alloc.allocate(2)
    assert "100-102" in err.value.message and "port_range" in err.value.message
    assert alloc.allocate(1) == [102]  # the failed call reserved nothing; 100 and 101 stay held


def test_rebuilt_from_live_handles():
    alloc = PortAllocator(100, 105, is_free=lambda h, p: True)
    alloc.reserve([100, 101])
    assert alloc.allocate(2) == [102, 103]


def test_try_reserve_is_all_or_nothing():
    alloc = PortAllocator(100, 105, is_free=lambda h, p: p != 104)
    assert alloc.try_reserve([100, 101])
    assert not alloc.try_reserve([101, 102])
    assert not alloc.try_reserve([103, 104])
    assert not alloc.try_reserve([99, 102])
    assert alloc.allocate(3) == [102, 103, 105]  # only 100 and 101 were taken


def listener_with_two_free_neighbours() -> socket.socket:
    """A listening socket on a port whose next two ports are free just now (another
    program may hold any random port's neighbours, so keep looking)."""
    for _ in range(50):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        if port < 65534 and port_is_free("127.0.0.1", port + 1) and port_is_free("127.0.0.1", port + 2):
            sock.listen()
            return sock
        sock.close()
    raise AssertionError("no port with two free neighbours on 127.0.0.1")


def test_a_real_listener_makes_its_port_unavailable():
    with listener_with_two_free_neighbours() as sock:
        port = sock.getsockname()[1]
        assert not port_is_free("127.0.0.1", port)
        alloc = PortAllocator(port, port + 2, bind_host="127.0.0.1")
        got = alloc.allocate(2)
        assert port not in got


def test_ports_other_nodes_remember_are_taken_last():
    alloc = PortAllocator(100, 105, is_free=lambda h, p: True)
    assert alloc.allocate(2, avoid={100, 101}) == [102, 103]
    # With nothing else free, a remembered pair is still better than no node at all.
    assert alloc.allocate(2, avoid={100, 101}) == [104, 105]
    assert alloc.allocate(2, avoid={100, 101}) == [100, 101]


def test_a_descriptor_shortage_is_no_busy_port_but_a_clear_machine_error():
    """EMFILE while probing a port is not "taken": the allocator says the host is out of descriptors."""
    def no_descriptors(host, port):
        raise OSError(errno.EMFILE, "Too many open files")

    alloc = PortAllocator(100, 110, is_free=no_descriptors)
    with pytest.raises(OutOfDescriptors) as err:
        alloc.allocate(2)
    assert "no file descriptor left" in err.value.message and "No free ports" not in err.value.message
    with pytest.raises(OutOfDescriptors):
        alloc.try_reserve([100, 101])
    assert not alloc._held  # nothing reserved


def test_a_descriptor_shortage_of_the_real_probe_is_told_apart(monkeypatch):
    def no_socket(*args, **kwargs):
        raise OSError(errno.ENFILE, "Too many open files in system")

    monkeypatch.setattr(socket, "socket", no_socket)
    alloc = PortAllocator(40100, 40110)
    with pytest.raises(OutOfDescriptors):
        alloc.allocate(2)
