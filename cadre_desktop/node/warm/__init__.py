"""The reference node's side of warm starts that fork (Linux): a standby's fork and park requests.

Imported only by a standby (`node/__main__.py`); it imports nothing of the node's but its
errors, so a cold start never loads it.
"""
