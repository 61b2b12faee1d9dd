"""The fleet in the tray: *Add a computer…* (a pairing code, its address and its QR code) and
*Join computers…* (a code and an address typed in), over the host's `fleet` (host/fleet/fleet.py).

It holds the two dialogs and `FleetUi`, which runs their work through the tray's `Actions` (errors
shown the one way, ui/errors.py). It may import Qt, the basics and the other rooms of `ui/` (the QR
widget of ui/nodes/qr.py, the forms of ui/prefs/dialogs.py, ui/actions.py); of the engine it calls
only what the Host's `fleet` offers. A pairing code is shown, never logged or written.
"""
