"""Run conditions: what this computer says about whether nodes may run now.

It holds the seam every condition source implements (``source.ConditionSource``: on
battery, in use, on a metered network; each a real platform implementation and a fake for
unit tests), the platform sources (UPower and NetworkManager over the system D-Bus and
the desktop's idle time on Linux; the platform's own APIs on Windows and macOS), the
weekly schedule, and the judge that turns readings and settings into one answer (run, or
hold until when and why) with its debounce. It may import the basics and the core (its
answers become holds, ``held_by: conditions``); never ``local``, ``lending``, ``edges``,
the node, or the front ends.
"""
