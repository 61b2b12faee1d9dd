"""The D-Bus property watch's handling of signals (what a real bus delivers is in
tests/integration/test_conditions_dbus.py): a change is taken only from the name's owner, of its
own object and interface; the owner leaving reads unknown; an invalidated property is read again."""

from __future__ import annotations

from dbus_fast import Message, MessageType, Variant

from cadre_desktop.host.conditions import battery
from cadre_desktop.host.conditions.source import Reading

IFACE = "org.freedesktop.UPower"


def changed(sender, value=True, path="/org/freedesktop/UPower", iface=IFACE, invalidated=None):
    return Message(message_type=MessageType.SIGNAL, path=path, interface="org.freedesktop.DBus.Properties",
                   member="PropertiesChanged", signature="sa{sv}as", sender=sender,
                   body=[iface, {} if value is None else {"OnBattery": Variant("b", value)}, invalidated or []])


def owner_changed(new_owner, sender="org.freedesktop.DBus"):
    return Message(message_type=MessageType.SIGNAL, path="/org/freedesktop/DBus", interface="org.freedesktop.DBus",
                   member="NameOwnerChanged", signature="sss", sender=sender, body=[IFACE, ":1.5", new_owner])


def watch_with_owner():
    watch = battery.upower_battery()
    heard: list[Reading] = []
    watch._changes.on_change = heard.append
    watch._owner = ":1.5"
    return watch, heard


def test_a_change_from_the_owner_is_taken():
    watch, heard = watch_with_owner()
    watch._on_message(changed(":1.5", True))
    assert heard == [Reading(True, "UPower over the system D-Bus", "on battery")]


def test_a_change_from_another_connection_or_object_or_interface_is_ignored():
    watch, heard = watch_with_owner()
    watch._on_message(changed(":1.99", True))
    watch._on_message(changed(":1.5", True, path="/org/freedesktop/UPower/devices/battery_BAT0"))
    watch._on_message(changed(":1.5", True, iface="org.freedesktop.UPower.Device"))
    watch._owner = None
    watch._on_message(changed(":1.5", True))
    assert heard == [] and watch.reading().value is None


def test_the_owner_leaving_reads_unknown_and_a_new_owner_asks_again():
    watch, heard = watch_with_owner()
    watch._on_message(changed(":1.5", False))
    watch._on_message(owner_changed("", sender=":1.99"))  # not from the bus itself: ignored
    assert watch.reading().value is False
    watch._on_message(owner_changed(""))
    assert heard[-1] == Reading(None, "UPower over the system D-Bus", "org.freedesktop.UPower left the bus")
    assert watch._owner is None and watch._kick.is_set()
    watch._kick.clear()
    watch._on_message(owner_changed(":1.7"))
    assert watch._kick.is_set(), "a new owner is read at once"


def test_an_invalidated_property_is_read_again_and_a_wrong_type_is_unknown():
    watch, heard = watch_with_owner()
    watch._on_message(changed(":1.5", None, invalidated=["OnBattery"]))
    assert watch._kick.is_set() and heard == []
    watch._on_message(changed(":1.5", True))
    bad = changed(":1.5", True)
    bad.body[1]["OnBattery"] = Variant("u", 1)
    watch._on_message(bad)
    assert heard[-1].value is None and "not a boolean" in heard[-1].detail
