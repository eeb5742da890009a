#!/usr/bin/env python3
"""Per-kernel device time of one decode step, from an Nsight Compute CSV.

    ncu --clock-control none --metrics gpu__time_duration.sum --csv edge0 bench M \
        --prefill 1 --decode N --skip-cold ... > ncu.csv
    scripts/ncu_step.py ncu.csv LAYERS [LAST]

Every pass of one token launches the rmsnorm kernel 2 LAYERS + 1 times, so
the run's passes are its rmsnorm launches / (2 LAYERS + 1) (prefill 1 +
decode N + bench's untimed warm-up, whatever it made); every kernel's time
is summed by name and divided by that. With LAST, only the run's last LAST
passes count (a pass begins at its first rmsnorm launch): e.g. the decode
steps after a prefill. Prints launches and
microseconds a step per kernel, longest first, and the total: set against
the step time of a run without the profiler (1 / decode tok/s), it splits a
step into kernel time and the time between kernels.
"""
import csv
import sys
from collections import defaultdict


def main():
    path, layers = sys.argv[1], int(sys.argv[2])
    last = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own messages are not quoted
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit, v = r.get("Metric Unit", "ns"), float(r["Metric Value"].replace(",", ""))
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(unit, 1e-3)
        rows.append((r["Kernel Name"].split("(")[0], v * scale))
    if last:
        norms = [i for i, (name, _) in enumerate(rows) if name == "rmsnorm"]
        starts = norms[::2 * layers + 1]
        if len(starts) < last:
            sys.exit(f"ncu_step: {len(starts)} passes in {path}, fewer than {last}")
        rows = rows[starts[-last]:]
    by = defaultdict(lambda: [0, 0.0])
    for name, us in rows:
        by[name][0] += 1
        by[name][1] += us
    steps = by["rmsnorm"][0] / (2 * layers + 1)
    if steps <= 0:
        sys.exit("ncu_step: no rmsnorm launches in " + path)
    total = sum(b[1] for b in by.values())
    print(f"{len(rows)} kernels, {steps:g} steps: {len(rows) / steps:.1f} launches and "
          f"{total / steps:.1f} us of kernels a step")
    print(f"{'kernel':40s} {'launches':>9s} {'us/step':>9s} {'us/launch':>10s} {'share':>6s}")
    for name, (n, us) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{name[:40]:40s} {n / steps:9.1f} {us / steps:9.1f} {us / n:10.2f} {100 * us / total:5.1f}%")


if __name__ == "__main__":
    main()
