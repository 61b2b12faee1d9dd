"""Node programs for the caps' tests: one that allocates until its memory cap stops it, one busy.

Each writes `ready.json` (its pid) into CADRE_NODE_DIR first, so a test knows it runs.
`cap_nodes.py hog` allocates 8 MiB at a time, touching every page, and prints how much
it holds; `cap_nodes.py busy` spins on one core.
"""

import json
import os
import sys

node_dir = os.environ["CADRE_NODE_DIR"]
with open(os.path.join(node_dir, "ready.json.tmp"), "w") as fh:
    json.dump({"pid": os.getpid()}, fh)
os.replace(os.path.join(node_dir, "ready.json.tmp"), os.path.join(node_dir, "ready.json"))

if sys.argv[1:] == ["hog"]:
    held = []
    while True:
        held.append(b"x" * (8 << 20))  # written: every page is touched
        print(f"holding {len(held) * 8} MiB", flush=True)
        if len(held) > 512:  # 4 GiB and still alive: the cap did not hold
            raise SystemExit(9)
else:
    while True:
        pass
