"""Caps the OS holds a node to: the one way this computer allows chosen (``caps``), a systemd user
scope over D-Bus (``scope``), cgroup v2 or v1 controllers (``cgroups``), each OS call behind a
seam. It may import the basics, ``system`` and the core's seam (``driver``), never the
orchestrator or another room of ``host/``.
"""
