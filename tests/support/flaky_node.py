"""The reference node, unless its work folder holds a `crash` marker.

Used as `node_command` by reliability tests: a test breaks a node by writing
`<work folder>/crash` (every start then exits 4 at once, so the host gives up
on it) and mends it by deleting the file before a Retry. Without the marker
this process *is* the reference node (same pid, same start time). It stands by
like the reference node when started with CADRE_STANDBY=1.
"""

import os
import runpy
import sys

if os.environ.get("CADRE_STANDBY") == "1":
    # A warm start: wait to be told which node this is, then look for its marker like a cold one.
    from cadre_desktop.node import __main__ as node_main

    if not node_main._stand_by():
        sys.exit(0)
node_dir = os.environ.get("CADRE_NODE_DIR", "")
if node_dir and os.path.exists(os.path.join(node_dir, "crash")):
    print("flaky node: crash marker present; exiting 4", flush=True)
    sys.exit(4)
runpy.run_module("cadre_desktop.node", run_name="__main__", alter_sys=True)
