"""What importing the host's modules costs a fresh process: RSS, USS and the packages loaded.

    .venv/bin/python bench/import_rss.py [--baseline PATH] [-n 7] [--name import_rss]

For each checkout (this one, and `--baseline`: another checkout, e.g. `git archive <commit> |
tar -x -C /tmp/before`), a fresh `python -c` per set of modules, with that checkout first on
sys.path, imports the set and reports its own RSS and USS (psutil, after a `gc.collect()`),
how many modules were loaded and whether aiohttp was among them. Rounds alternate the
checkouts; the figure is the median of `-n` rounds. The sets: Python alone, the two HTTP
servers of the engine (the control API and the lend API), and the whole engine as the tray
builds it (`cadre_desktop.host.host`, whose probe and invitations are HTTP clients).
Writes bench/results/NAME.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from _report import load, write_result

HERE = Path(__file__).resolve().parents[1]
SETS = {
    "python alone": [],
    "the servers (control API, lend API)": ["cadre_desktop.host.edges.control", "cadre_desktop.host.edges.lend_api"],
    "the engine (cadre_desktop.host.host)": ["cadre_desktop.host.host"],
    "the engine and aiohttp (its clients' first use)": ["cadre_desktop.host.host", "aiohttp"],
}
PROBE = (
    "import gc, importlib, json, sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "for name in sys.argv[2:]: importlib.import_module(name)\n"
    "gc.collect()\n"
    "import psutil\n"
    "mem = psutil.Process().memory_full_info()\n"
    "print(json.dumps({'rss': mem.rss, 'uss': mem.uss, 'modules': len(sys.modules),\n"
    "                  'aiohttp': any(m.split('.')[0] == 'aiohttp' for m in sys.modules),\n"
    "                  'ours': sys.modules.get('cadre_desktop').__file__ if 'cadre_desktop' in sys.modules else None}))\n"
)


def measure(checkout: Path, modules: list[str]) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-I", "-c", PROBE, str(checkout), *modules], capture_output=True,
                         text=True, check=True, cwd="/").stdout
    result: dict[str, object] = json.loads(out)
    ours = result.pop("ours")
    if modules and not str(ours).startswith(str(checkout)):
        raise SystemExit(f"{checkout}: imported {ours}, not the checkout's own modules")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to measure beside this one")
    parser.add_argument("-n", type=int, default=7, help="rounds (the median is reported)")
    parser.add_argument("--name", default="import_rss", help="the result file's name (bench/results/NAME.json)")
    args = parser.parse_args()
    at_start = load()
    checkouts = {"after": HERE, **({"before": args.baseline.resolve()} if args.baseline else {})}
    samples: dict[str, dict[str, list[dict[str, object]]]] = {c: {s: [] for s in SETS} for c in checkouts}
    for round_ in range(args.n):
        order = list(checkouts) if round_ % 2 == 0 else list(reversed(checkouts))
        for label in order:
            for name, modules in SETS.items():
                samples[label][name].append(measure(checkouts[label], modules))
    report: dict[str, object] = {"rounds": args.n, "checkouts": {k: str(v) for k, v in checkouts.items()}, "sets": {}}
    print(f"{'set':42} {'checkout':8} {'RSS MB':>7} {'USS MB':>7} {'modules':>8} aiohttp")
    for name in SETS:
        rows = {}
        for label in checkouts:
            got = samples[label][name]
            row = {"rss_mb": round(statistics.median(float(str(g["rss"])) for g in got) / 2**20, 1),
                   "uss_mb": round(statistics.median(float(str(g["uss"])) for g in got) / 2**20, 1),
                   "modules": int(statistics.median(int(str(g["modules"])) for g in got)),
                   "aiohttp": any(bool(g["aiohttp"]) for g in got)}
            rows[label] = row
            print(f"{name:42} {label:8} {row['rss_mb']:7.1f} {row['uss_mb']:7.1f} {row['modules']:8d} {row['aiohttp']}")
        report["sets"][name] = rows  # type: ignore[index]
    report["loadavg_at_start"] = at_start
    print(f"wrote {write_result(args.name, report)}")


if __name__ == "__main__":
    main()
