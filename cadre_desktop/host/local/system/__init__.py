"""The operating system's calls on processes for the local driver, behind one seam:
``seam.ProcessOS`` (and ``for_this_os``, which picks the class once), one class per
platform (``linux``, ``posix``, ``windows``; Windows Job objects in ``winjob``), and what
they share (``procs``: identities, the spawn, exit watches). It may import the basics only,
never the rest of the driver, the core, the node or a front end.
"""
