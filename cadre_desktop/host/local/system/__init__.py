"""The operating system's calls on processes for the local driver: process groups, pidfds, signals
and spawning (``procs``) and Windows Job objects (``winjob``). It may import the basics only,
never the rest of the driver, the core, the node or a front end.
"""
