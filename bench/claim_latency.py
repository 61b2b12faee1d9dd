"""A claim from the phone → the node joined in the host's view: how long it takes.

    .venv/bin/python bench/claim_latency.py [--claims 8] [--baseline PATH] [--name claim-latency]

A headless host (default `probe_interval_ms`, 5 s) with `--claims` unclaimed reference nodes;
each is claimed in turn (`POST /claim`, as the phone does), at staggered moments, and the
control API is read every 5 ms until the node's view says `joined`. With `--baseline PATH`
another checkout's host is measured the same way right after. Writes bench/results/NAME.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import _rig
from _report import ROOT, write_result

from tests.support.claim_link import claim
from tests.support.headless import HeadlessHost, added, fast_settings, running_node


def measure(checkout: Path, claims: int, keyring_env: dict) -> list[float]:
    host = HeadlessHost(Path(tempfile.mkdtemp(prefix="cadre-claim-")) / "home", keyring_env,
                        fast_settings(probe_interval_ms=5000))
    host.env["PYTHONPATH"] = str(checkout)
    host.start()
    took = []
    try:
        nodes = [running_node(host, added(host, f"claim {i}")["id"]) for i in range(claims)]
        time.sleep(3)  # the probe settles into its cadence for nodes waiting for their claim
        for i, node in enumerate(nodes):
            time.sleep(0.37 * i % 2.0)  # claims fall at different moments of a two-second cadence
            status, body = claim(node["claim_url"], "family")
            assert status == 200, body
            began = time.monotonic()
            while host.node(node["id"])["status"] != "joined":
                time.sleep(0.005)
            took.append(round((time.monotonic() - began) * 1000, 1))
    finally:
        host.stop()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=8)
    parser.add_argument("--baseline", type=Path, help="another checkout measured after this one")
    parser.add_argument("--name", default="claim-latency")
    args = parser.parse_args()
    checkouts = {"this checkout": ROOT}
    if args.baseline:
        checkouts[f"baseline {args.baseline}"] = args.baseline.resolve()
    session, keyring_env = _rig.start_secret_service()
    result: dict = {"claims": args.claims, "loadavg_at_start": os.getloadavg(), "claim_to_joined_ms": {}}
    try:
        for name, checkout in checkouts.items():
            _rig.compile_checkout(checkout)
            took = measure(checkout, args.claims, keyring_env)
            result["claim_to_joined_ms"][name] = {"each": took, "median": statistics.median(took), "max": max(took)}
            print(f"{name:40} claim → joined: median {statistics.median(took):.0f} ms, max {max(took):.0f} ms, "
                  f"each {took}")
    finally:
        session.stop()
    result["loadavg_at_end"] = os.getloadavg()
    print(f"wrote {write_result(args.name, result)}")


if __name__ == "__main__":
    main()
