#!/usr/bin/env python3
"""Self costs per instruction of the functions whose name contains FUNC, from a callgrind
output file written with `--dump-instr=yes` (BENCHMARKS.md, "Where the cycles go").

    scripts/callgrind_instr.py callgrind.out run_contains

Prints one line per instruction address: the address, then every event callgrind recorded
(Ir, and with --cache-sim=yes Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw). Match the addresses
against `objdump -d -C` of the binary to attribute them to source.
"""
import collections
import re
import sys


def main(path, func):
    events, positions = [], []
    names, last = {}, []
    current, skip_call_cost = None, False
    cost = collections.defaultdict(list)
    for line in open(path):
        line = line.rstrip("\n")
        if line.startswith("events:"):
            events = line.split()[1:]
            continue
        if line.startswith("positions:"):
            positions = line.split()[1:]
            last = [0] * len(positions)
            continue
        named = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line)
        if named:
            kind, ident, name = named.groups()
            if name:
                names[ident] = name
            if kind == "fn":
                current = names.get(ident)
            continue
        if line.startswith("calls="):
            # The next cost line is the call's inclusive cost: not this function's own.
            skip_call_cost = True
            continue
        if not line or line[0] not in "0123456789+-*":
            continue
        parts = line.split()
        for i, p in enumerate(parts[: len(positions)]):
            if p == "*":
                continue
            if p[0] in "+-":
                last[i] += int(p, 0)
            else:
                last[i] = int(p, 0)
        if skip_call_cost:
            skip_call_cost = False
            continue
        if current and func in current:
            values = [int(v) for v in parts[len(positions):]]
            values += [0] * (len(events) - len(values))
            old = cost[last[0]]
            cost[last[0]] = [a + b for a, b in zip(old, values)] if old else values
    print("addr", *events)
    for address in sorted(cost):
        print(hex(address), *cost[address])


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
