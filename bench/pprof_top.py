"""The top functions of a Go CPU profile, without Go's own tools (`go tool pprof` is not installed here).

    .venv/bin/python bench/pprof_top.py PROFILE [--top 30] [--stacks]

PROFILE is what a Go program's `/debug/pprof/profile?seconds=N` answers (etcd's with
`--enable-pprof`; `bench/etcd_idle.py --probe` fetches one in its window): a gzipped protobuf
(`profile.proto`) that carries its own function names. Prints each function's own time (flat)
and the time of the samples it was on the stack of (cumulative); `--stacks` the commonest stacks.
Only the few fields of `profile.proto` this needs are read: samples, locations, functions, strings.
"""

from __future__ import annotations

import argparse
import gzip
from collections import Counter
from collections.abc import Iterator
from pathlib import Path


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of one protobuf message, in order."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        kind: int = key & 7
        value: int | bytes
        if kind == 0:
            value, i = _varint(data, i)
        elif kind == 2:
            size, i = _varint(data, i)
            value, i = data[i:i + size], i + size
        elif kind == 1:
            value, i = data[i:i + 8], i + 8
        elif kind == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {kind} is not in a pprof profile")
        yield key >> 3, kind, value


def _ints(value: int | bytes) -> list[int]:
    """A repeated integer field's values, packed or not."""
    if isinstance(value, int):
        return [value]
    out, i = [], 0
    while i < len(value):
        number, i = _varint(value, i)
        out.append(number)
    return out


def read_profile(path: Path) -> tuple[list[tuple[list[str], int]], int]:
    """Each sample's stack (innermost first, by function name) and its last value (CPU ns)."""
    data = gzip.decompress(path.read_bytes())
    strings: list[str] = []
    samples: list[tuple[list[int], list[int]]] = []
    locations: dict[int, list[int]] = {}
    functions: dict[int, int] = {}
    for number, _, value in _fields(data):
        if not isinstance(value, bytes):
            continue
        if number == 6:
            strings.append(value.decode("utf-8", "replace"))
        elif number == 2:
            ids: list[int] = []
            values: list[int] = []
            for n, _, v in _fields(value):
                (ids if n == 1 else values if n == 2 else []).extend(_ints(v))
            samples.append((ids, values))
        elif number == 4:
            location, lines = 0, []
            for n, _, v in _fields(value):
                if n == 1 and isinstance(v, int):
                    location = v
                elif n == 4 and isinstance(v, bytes):
                    lines += [f for m, _, f in _fields(v) if m == 1 and isinstance(f, int)]
            locations[location] = lines
        elif number == 5:
            function = name = 0
            for n, _, v in _fields(value):
                if n == 1 and isinstance(v, int):
                    function = v
                elif n == 2 and isinstance(v, int):
                    name = v
            functions[function] = name
    stacks = [([strings[functions[f]] for loc in ids for f in locations.get(loc, [])], values[-1] if values else 0)
              for ids, values in samples]
    return stacks, sum(ns for _, ns in stacks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--stacks", action="store_true")
    args = parser.parse_args()
    stacks, total = read_profile(args.profile)
    flat: Counter[str] = Counter()
    cumulative: Counter[str] = Counter()
    whole: Counter[str] = Counter()
    for chain, ns in stacks:
        if chain:
            flat[chain[0]] += ns
        cumulative.update(dict.fromkeys(set(chain), ns))
        whole[" < ".join(chain[:12])] += ns
    print(f"{total / 1e6:.1f} ms of CPU in {len(stacks)} samples")
    for title, counts in (("flat", flat), ("cumulative", cumulative)) + ((("stacks", whole),) if args.stacks else ()):
        print(f"-- {title}")
        for name, ns in counts.most_common(args.top):
            print(f"{ns / 1e6:8.1f} ms {ns / max(total, 1) * 100:5.1f} %  {name}")


if __name__ == "__main__":
    main()
