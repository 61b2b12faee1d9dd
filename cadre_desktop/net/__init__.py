"""The network's basics, shared by the host and the node: connection caps, idle limits and fair
accepting for every server (``netguard``), descriptors raised, reserved and a shortage told
apart (``fdlimit``), the one HTTP/1.1 client (``httpclient``, h11 over asyncio streams) and
asyncio imported without ``ssl`` (``plainasync``). They import only the standard library, h11
and the other basics, never the engine, the node or a front end.
"""
