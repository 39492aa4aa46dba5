#!/usr/bin/env python3
"""Turns Google Benchmark JSON from gpumem's benchmarks into docs-ready markdown (standard library only).

    python3 scripts/bench_table.py build/bench/alloc.json [more.json ...] [--command "bash scripts/bench.sh"]
                                   [--title "..."] [--peer cuda_async_default]

Benchmark names are <workload>/<resource>[/<parameter>] (e.g. fixed/pool/4KiB, random/arena,
random_mt/pool/16), with Google Benchmark's suffixes (/real_time, /manual_time, /iterations:N, ...) removed.
Tables, one row per workload and one column per resource, in the order the resources ran:
  1. the figure (counter ns_per_pair for fixed, ns_per_op otherwise), the median over repetitions, and in
     parentheses its ratio to the peer column (cudaMallocAsync: cuda_async_default); below 1 is faster;
  2. fragmentation (peak bytes taken from upstream / peak live bytes), for resources that report it;
  3. random_mt's speedup_vs_1_thread.
The median: the "median" aggregate when the run reported aggregates, else the median of the repetitions.
A benchmark that failed (error_occurred) shows as FAILED and makes the exit status 1.
"""

import argparse
import json
import re
import statistics
import sys

SUFFIX = re.compile(r"/(real_time|manual_time|(iterations|repeats|min_time|min_warmup_time|threads):[^/]*)$")
FIGURE_COUNTERS = ("ns_per_pair", "ns_per_op")


def base_name(name):
    while True:
        stripped = SUFFIX.sub("", name)
        if stripped == name:
            return name
        name = stripped


def split_name(name):
    """fixed/pool/4KiB -> ("fixed/4KiB", "pool"); random/pool -> ("random", "pool")."""
    parts = base_name(name).split("/")
    if len(parts) < 2:
        return parts[0], ""
    return "/".join([parts[0]] + parts[2:]), parts[1]


def load(paths):
    """Returns (context, {(workload, resource): {"values": {counter: [..]}, "median": {..}, "error": str}},
    workloads in order, resources in order)."""
    context = {}
    cells = {}
    workloads, resources = [], []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        context = context or data.get("context", {})
        for b in data.get("benchmarks", []):
            run_name = b.get("run_name", b["name"])
            workload, resource = split_name(run_name)
            if workload not in workloads:
                workloads.append(workload)
            if resource not in resources:
                resources.append(resource)
            cell = cells.setdefault((workload, resource), {"values": {}, "median": {}, "error": None})
            if b.get("error_occurred"):
                cell["error"] = b.get("error_message", "error")
                continue
            numeric = {k: v for k, v in b.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            run_type = b.get("run_type", "iteration")
            if run_type == "aggregate":
                if b.get("aggregate_name") == "median":
                    cell["median"].update(numeric)
            else:
                for k, v in numeric.items():
                    cell["values"].setdefault(k, []).append(v)
    return context, cells, workloads, resources


def value(cell, counter):
    if cell is None or cell["error"]:
        return None
    if counter in cell["median"]:
        return cell["median"][counter]
    vals = cell["values"].get(counter)
    return statistics.median(vals) if vals else None


def repetitions(cells):
    counts = [len(c["values"].get("real_time", [])) for c in cells.values()]
    return max(counts) if counts else 0


def fmt_ns(v):
    if v >= 1000:
        return f"{v:,.0f}"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_ratio(r):
    return f"{r:.2f}×" if r < 10 else f"{r:,.0f}×"


def figure(cell):
    for counter in FIGURE_COUNTERS:
        v = value(cell, counter)
        if v is not None:
            return v
    return None


def table(rows, resources, render):
    out = ["| workload | " + " | ".join(f"`{r}`" for r in resources) + " |",
           "| --- |" + " ---: |" * len(resources)]
    for workload in rows:
        cells = [render(workload, r) for r in resources]
        if all(c == "" for c in cells):
            continue
        out.append(f"| `{workload}` | " + " | ".join(c or "–" for c in cells) + " |")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", nargs="+")
    parser.add_argument("--command", help="the command that produced the JSON, quoted in the output")
    parser.add_argument("--title", default=None)
    parser.add_argument("--peer", default="cuda_async_default", help="the column ratios are taken to")
    args = parser.parse_args()

    context, cells, workloads, resources = load(args.json)
    failed = sorted(f"{w} / {r}: {c['error']}" for (w, r), c in cells.items() if c["error"])

    lines = []
    if args.title:
        lines += [f"### {args.title}", ""]
    device = context.get("gpumem_device", "?")
    backend = context.get("gpumem_backend", "?")
    lines.append(f"- device: {device} (gpumem backend: {backend}); host: {context.get('host_name', '?')}, "
                 f"{context.get('num_cpus', '?')} CPUs; date: {context.get('date', '?')}")
    reps = repetitions(cells)
    stat = "median of the repetitions" if reps > 1 or any(c["median"] for c in cells.values()) else "one run"
    lines.append(f"- figure: {stat}; fixed: ns per allocate+free pair; random, random_mt: ns per operation "
                 f"(wall time over all threads for random_mt)")
    if args.command:
        lines.append(f"- command: `{args.command}`")
    lines.append("")

    peer = args.peer if args.peer in resources else None

    def render_figure(workload, resource):
        cell = cells.get((workload, resource))
        if cell is None:
            return ""
        if cell["error"]:
            return "FAILED"
        v = figure(cell)
        if v is None:
            return ""
        text = fmt_ns(v)
        if peer and resource != peer:
            p = figure(cells.get((workload, peer)))
            if p:
                text += f" ({fmt_ratio(v / p)})"
        return text

    caption = "ns (ratio to `" + peer + "`, below 1 is faster)" if peer else "ns"
    lines += [f"Median {caption}:", ""] + table(workloads, resources, render_figure) + [""]

    def render_counter(counter, fmt):
        def render(workload, resource):
            v = value(cells.get((workload, resource)), counter)
            return "" if v is None else fmt(v)
        return render

    frag_rows = [w for w in workloads if w.startswith("random")]
    frag = table(frag_rows, resources, render_counter("fragmentation", lambda v: f"{v:.2f}"))
    if len(frag) > 2:
        lines += ["Fragmentation (peak bytes taken from upstream / peak live bytes):", ""] + frag + [""]
    mt_rows = [w for w in workloads if w.startswith("random_mt/") and not w.endswith("/1")]
    speed = table(mt_rows, resources, render_counter("speedup_vs_1_thread", lambda v: f"{v:.2f}×"))
    if len(speed) > 2:
        lines += ["random_mt throughput relative to 1 thread (random_mt/<resource>/1):", ""] + speed + [""]
    if failed:
        lines += ["FAILED benchmarks:", ""] + [f"- {f}" for f in failed] + [""]
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
