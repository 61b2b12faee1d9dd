"""The keyring at start: what reading every node's secret costs the host, in memory and time.

    .venv/bin/python bench/keyring_reads.py [--secrets 30] [--rounds 5]

A real gnome-keyring on a private D-Bus session holds `--secrets` claim secrets. Each
round starts two fresh processes, one per way, in alternating order: each imports the
engine (`cadre_desktop.host.host`), then the keyring gate reads every secret ahead
(`KeyringGate.prefetch`, as `Host.start` does), and reports its own RSS before and
after, and the time of the reads (the first one alone, and all of them):

  in process   the calls made in the host (`keyring_calls.BackendCalls`: what the host
               did before issue 26, and still does on Windows and macOS)
  helper       the calls made by the keyring helper process (`keyring_helper.HelperCalls`,
               the Linux default now): started by the first read, closed when idle

The helper's own RSS is taken while it is alive. Writes
bench/results/keyring-reads.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

import _rig
from _report import summary, table, write_result

HOME_ID = "hbench00000001"
WAYS = ("in process", "helper")


def rss_mb(pid: int | str = "self") -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def probe(way: str, count: int) -> dict:
    """In a fresh process: import the engine, read `count` secrets through the gate."""
    import cadre_desktop.host.host  # noqa: F401  (the engine, as the tray loads it)
    from cadre_desktop.host.core.vault.keyring_gate import KeyringGate
    from cadre_desktop.host.core.vault.secrets import SecretKind, SecretStore
    from cadre_desktop.keyrings.keyring_helper import HelperCalls

    before = rss_mb()
    calls = None
    if way == "in process":
        from cadre_desktop.keyrings.keyring_calls import BackendCalls

        calls = BackendCalls()
    store = SecretStore(home_id=HOME_ID, calls=calls or HelperCalls())

    async def read() -> dict:
        gate = KeyringGate(store)
        began = time.perf_counter()
        await gate.load("n0", SecretKind.CLAIM)
        first = time.perf_counter() - began
        await gate.prefetch([(f"n{i}", SecretKind.CLAIM) for i in range(count)])
        total = time.perf_counter() - began
        assert all(gate.cached(f"n{i}", SecretKind.CLAIM) for i in range(count)), "a secret was not read"
        helper_pid = getattr(store.calls, "pid", None)
        out = {"first_read_ms": first * 1000, "reads_ms": total * 1000,
               "helper_rss_mb": rss_mb(helper_pid) if helper_pid else None}
        await gate.close()
        return out

    result = asyncio.run(read())
    result.update(rss_engine_mb=before, rss_after_mb=rss_mb(),
                  heavy_modules=sorted({m.split(".")[0] for m in sys.modules}
                                       & {"keyring", "secretstorage", "jeepney", "cryptography"}))
    store.close()
    return result


def seed(count: int) -> None:
    from cadre_desktop.keyrings.keyring_calls import BackendCalls
    from cadre_desktop.keyrings.keyring_names import SecretKind, Where

    calls = BackendCalls()
    for i in range(count):
        calls.set(Where(HOME_ID), f"n{i}", SecretKind.CLAIM, f"bench-secret-{i}-" + "x" * 32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--secrets", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--probe", choices=WAYS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        print(json.dumps(probe(args.probe, args.secrets)))
        return
    session, keyring_env = _rig.start_secret_service()
    env = {**os.environ, **keyring_env, "PYTHONPATH": str(_rig.ROOT)}
    try:
        subprocess.run([sys.executable, "-c", f"import sys; sys.path[:0] = ['{_rig.ROOT / 'bench'}']; "
                        f"import keyring_reads; keyring_reads.seed({args.secrets})"], env=env, check=True)
        runs: dict[str, list[dict]] = {way: [] for way in WAYS}
        loadavg = os.getloadavg()
        for i in range(args.rounds):
            for way in (WAYS if i % 2 == 0 else WAYS[::-1]):
                out = subprocess.run([sys.executable, __file__, "--probe", way, "--secrets", str(args.secrets)],
                                     env=env, check=True, capture_output=True, text=True).stdout
                runs[way].append(json.loads(out))
    finally:
        session.stop()
    fields = ("rss_engine_mb", "rss_after_mb", "first_read_ms", "reads_ms", "helper_rss_mb")
    result = {"secrets": args.secrets, "rounds": args.rounds, "loadavg_at_start": loadavg,
              "loadavg_at_end": os.getloadavg(), "runs": runs,
              "summary": {way: {f: summary([r[f] for r in rs if r[f] is not None]) for f in fields}
                          for way, rs in runs.items()}}
    headers = ["way", "RSS engine (MB)", "RSS after reads (MB)", "+ reads (MB)", "first read (ms)",
               f"{args.secrets} reads (ms)", "helper RSS (MB)", "heavy modules in the host"]
    rows = []
    for way, rs in runs.items():
        s = result["summary"][way]
        rows.append([way, s["rss_engine_mb"]["p50"], s["rss_after_mb"]["p50"],
                     s["rss_after_mb"]["p50"] - s["rss_engine_mb"]["p50"], s["first_read_ms"]["p50"],
                     s["reads_ms"]["p50"], s["helper_rss_mb"]["p50"], ",".join(rs[-1]["heavy_modules"]) or "none"])
    print(table(headers, rows, digits=1))
    print("medians of", args.rounds, "rounds; wrote", write_result("keyring-reads", result))


if __name__ == "__main__":
    main()
