#!/usr/bin/env python3
"""Writes docs/PERFORMANCE.md from recorded benchmark results (standard library only).

    bash scripts/gpu_check.sh --bench --out DIR          # on the GPU machine: DIR/bench.json
    python3 scripts/performance_page.py DIR > docs/PERFORMANCE.md

Inputs: folders holding a bench.json, or bench.json files (scripts/bench_record.py describes the format:
one run per benchmark executable or CLI command, each with its command and its machine). With several
inputs, a run named again replaces the earlier one, so that `--bench` and `--vmm` of separate calls combine.
Output: the whole page on standard output. The prose is scripts/performance_page.md.in, whose {{section}}
lines are replaced by tables made from the data; every table names the command that produced it and the
device, backend, date and commit of its run. A section without data says which run would fill it.
Exit status 1 when an input cannot be read or a benchmark in it failed (the page is still written, the
failure listed in it).
"""

import argparse
import json
import os
import re
import statistics
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "performance_page.md.in")
FORMAT = "gpumem-bench-bundle/1"

# Google Benchmark's suffixes of a run name (/real_time, /iterations:N, ...).
SUFFIX = re.compile(r"/(real_time|manual_time|(iterations|repeats|min_time|min_warmup_time):[^/]*)$")
PEERS = ("cuda", "cuda_async_default")  # the CUDA peers of gpumem_bench_alloc: not gpumem's figures
PYTORCH_LOGS = ("pytorch_",)


# ---- loading ------------------------------------------------------------------------------------------------

def load_runs(paths):
    runs = {}
    for path in paths:
        if os.path.isdir(path):
            path = os.path.join(path, "bench.json")
        with open(path, encoding="utf-8") as f:
            bundle = json.load(f)
        if bundle.get("format") != FORMAT:
            raise ValueError(f"{path}: not a {FORMAT} file")
        for run in bundle["runs"]:
            runs[run["name"]] = run
    return runs


def base_name(name):
    while True:
        stripped = SUFFIX.sub("", name)
        if stripped == name:
            return name
        name = stripped


class Benchmarks:
    """The medians of one Google Benchmark run, by benchmark name (suffixes removed)."""

    def __init__(self, run):
        self.order = []
        self.median = {}
        self.values = {}
        self.errors = {}
        for b in run["benchmarks"]:
            name = base_name(b.get("run_name", b["name"]))
            if name not in self.order:
                self.order.append(name)
            if b.get("error_occurred"):
                self.errors[name] = b.get("error_message", "error")
                continue
            numbers = {k: v for k, v in b.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            if b.get("run_type") == "aggregate":
                if b.get("aggregate_name") == "median":
                    self.median.setdefault(name, {}).update(numbers)
            else:
                for k, v in numbers.items():
                    self.values.setdefault(name, {}).setdefault(k, []).append(v)

    def get(self, name, counter):
        if name in self.errors:
            return None
        if counter in self.median.get(name, {}):
            return self.median[name][counter]
        vals = self.values.get(name, {}).get(counter)
        return statistics.median(vals) if vals else None

    def statistic(self):
        if self.median:
            return "median of the repetitions"
        counts = [len(v.get("real_time", [])) for v in self.values.values()]
        return "median of the repetitions" if counts and max(counts) > 1 else "one run"


# ---- formatting ---------------------------------------------------------------------------------------------

def fmt(v):
    if v is None:
        return "–"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_ratio(r):
    return f"{r:.2f}×" if r < 10 else f"{r:,.0f}×"


def fmt_bytes(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n // size} {unit}" if n % size == 0 else f"{n / size:.2f} {unit}"
    return f"{n} B"


def table(header, rows, right_from=1):
    out = ["| " + " | ".join(header) + " |",
           "|" + "".join(" --- |" if i < right_from else " ---: |" for i in range(len(header)))]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def source(run, note=None):
    ctx = run.get("context", {})
    lines = [f"- command: `{run['command']}`",
             f"- device: {ctx.get('gpumem_device', 'unknown')} "
             f"(gpumem backend: {ctx.get('gpumem_backend', 'unknown')}); "
             f"host: {ctx.get('host_name', 'unknown')}, {ctx.get('num_cpus', '?')} CPUs; "
             f"date: {ctx.get('date', 'unknown')}; commit: {ctx.get('gpumem_commit', 'unknown')}"]
    if note:
        lines.append(f"- figure: {note}")
    return lines + [""]


def missing(name):
    return textwrap.wrap(f"_Not in this data: the run `{name}` of `bash scripts/gpu_check.sh --bench` (or "
                         f"`bash scripts/bench.sh --only {name}`) fills this section._", 110)


def google_section(name, note):
    """Makes body(run, benchmarks) the section of the Google Benchmark run `name`: the run's source lines
    (its figure: note(benchmarks)), the body's lines, then the benchmarks that failed."""
    def wrap(body):
        def section(runs):
            run = runs.get(name)
            if not run:
                return missing(name)
            b = Benchmarks(run)
            return (source(run, note(b)) + body(run, b) +
                    [f"- FAILED `{n}`: {e}" for n, e in b.errors.items()])
        return section
    return wrap


# ---- sections -----------------------------------------------------------------------------------------------

def split_resource(name):
    """fixed/pool/4KiB -> ("fixed/4KiB", "pool"); random/pool -> ("random", "pool")."""
    parts = name.split("/")
    if len(parts) < 2:
        return name, ""
    return "/".join([parts[0]] + parts[2:]), parts[1]


def bench_name(workload, resource):
    """("fixed/4KiB", "pool") -> fixed/pool/4KiB; ("random", "pool") -> random/pool."""
    head, _, rest = workload.partition("/")
    return f"{head}/{resource}" + (f"/{rest}" if rest else "")


def grid(b):
    """(workloads, resources) of a <workload>/<resource>[/<parameter>] run, in the order they ran."""
    workloads, resources = [], []
    for name in b.order:
        w, r = split_resource(name)
        if w not in workloads:
            workloads.append(w)
        if r not in resources:
            resources.append(r)
    return workloads, resources


def figure(b, name, counters):
    for c in counters:
        v = b.get(name, c)
        if v is not None:
            return v
    return None


def ratio_grid(b, peer_of, counters, caption):
    """A workload x resource table of `counters`' first present one, with the ratio to peer_of(resource)."""
    workloads, resources = grid(b)
    rows = []
    for w in workloads:
        cells = []
        for r in resources:
            name = bench_name(w, r)
            if name in b.errors:
                cells.append("FAILED")
                continue
            v = figure(b, name, counters)
            text = "" if v is None else fmt(v)
            peer = peer_of(r)
            if v is not None and peer and peer != r:
                p = figure(b, bench_name(w, peer), counters)
                if p:
                    text += f" ({fmt_ratio(v / p)}" + (f" `{peer}`" if peer != peer_of(None) else "") + ")"
            cells.append(text)
        if any(cells):
            rows.append([f"`{w}`"] + [c or "–" for c in cells])
    return [caption, ""] + table(["workload"] + [f"`{r}`" for r in resources], rows) + [""]


def counter_grid(b, counter, render, caption, only=lambda w: True):
    """A table of `counter` by workload and resource; render(value, benchmark name) writes a cell."""
    workloads, resources = grid(b)
    rows = []
    for w in workloads:
        if not only(w):
            continue
        cells = []
        for r in resources:
            v = b.get(bench_name(w, r), counter)
            cells.append("" if v is None else render(v, bench_name(w, r)))
        if any(cells):
            rows.append([f"`{w}`"] + [c or "–" for c in cells])
    if not rows:
        return []
    return [caption, ""] + table(["workload"] + [f"`{r}`" for r in resources], rows) + [""]


def fragmentation_cell(b, v, name):
    """A fragmentation figure; where the benchmark sampled fresh instances (random_mt and random_streams on
    several threads), the median with the range in brackets."""
    low, high = b.get(name, "fragmentation_min"), b.get(name, "fragmentation_max")
    return f"{v:.2f}" + (f" ({low:.2f} – {high:.2f})" if low is not None and high is not None else "")


@google_section("alloc", lambda b: f"{b.statistic()}; fixed: ns per allocate+free pair; random, random_mt, "
                                    "random_streams: ns per operation (wall time over all threads for the last two)")
def section_alloc(run, b):
    peer = "cuda_async_default" if "cuda_async_default" in grid(b)[1] else None
    caption = (f"Median ns (ratio to `{peer}`, below 1 is faster):" if peer else "Median ns:")
    out = ratio_grid(b, lambda r: peer, ("ns_per_pair", "ns_per_op"), caption)
    sampled = any(b.get(name, "fragmentation_min") is not None for name in b.order)
    out += counter_grid(b, "fragmentation", lambda v, name: fragmentation_cell(b, v, name),
                        "Fragmentation (peak bytes taken from upstream / peak live bytes" +
                        ("; on several threads, of the untimed pass of each of several fresh instances, whose "
                         "interleavings differ: the median, the lowest and highest in brackets):" if sampled else "):"),
                        lambda w: w.startswith("random"))
    out += counter_grid(b, "speedup_vs_1_thread", lambda v, name: f"{v:.2f}×",
                        "random_mt throughput relative to 1 thread (`random_mt/<resource>/1`):",
                        lambda w: w.startswith("random_mt/") and not w.endswith("/1"))
    return out


@google_section("adaptors", lambda b: f"{b.statistic()}; ns per allocate+free pair for fixed, per operation otherwise")
def section_adaptors(run, b):
    def base(r):
        if r is None:
            return "none"
        return "none_managed" if r == "prefetch" else (None if r.startswith("none") else "none")
    return ratio_grid(b, base, ("ns_per_pair", "ns_per_op"),
                      "Median ns (ratio to the base `none`, the pool alone; `prefetch` to `none_managed`, a pool "
                      "over managed memory):")


@google_section("plain", lambda b: f"{b.statistic()}; ns per allocate+free pair")
def section_plain(run, b):
    rows = []
    for name in b.order:
        if not name.startswith("plain/pool/"):
            continue
        size = name.split("/")[-1]
        pool = b.get(name, "ns_per_pair")
        plain = b.get(f"plain/alloc_free/{size}", "ns_per_pair")
        added = fmt(plain - pool) if pool is not None and plain is not None else "–"
        rows.append([size, fmt(pool), fmt(plain), added])
    out = table(["size", "pool `allocate` + `deallocate`", "`gpumem::alloc` + `gpumem::free`",
                 "added by the plain API"], rows) + [""]
    lookup = b.get("plain/get_current_device_resource", "ns_per_call")
    if lookup is not None:
        out += [f"`mr::get_current_device_resource()` alone: {fmt(lookup)} ns per call.", ""]
    return out


def copy_size(run):
    copy_bytes = run.get("context", {}).get("gpumem_copy_bytes")
    return fmt_bytes(int(copy_bytes)) if copy_bytes else "?"


@google_section("transfer", lambda b: f"{b.statistic()}; GB/s")
def section_transfer(run, b):
    size = copy_size(run)
    rows = []
    labels = {"h2d_pinned": "host→device, pinned", "d2h_pinned": "device→host, pinned",
              "h2d_pageable": "host→device, pageable", "d2h_pageable": "device→host, pageable"}
    for kind, label in labels.items():
        cuda = b.get(f"transfer/{kind}/cudaMemcpyAsync", "GB/s")
        gpumem = b.get(f"transfer/{kind}/gpumem", "GB/s")
        unified = b.get(f"transfer/{kind}/unified_buffer", "GB/s")
        if cuda is None and gpumem is None and unified is None:
            continue
        quotient = "–"
        if cuda and unified:
            q = unified / cuda
            quotient = f"{q * 100:.1f} %" if q < 2 else f"{q:.1f}×"
        rows.append([label, fmt(cuda), fmt(gpumem), fmt(unified), quotient])
    out = table([f"copy of {size}", "`cudaMemcpyAsync`", "`copy_to_device` / `copy_to_host`",
                 "`unified_buffer` sync", "unified / CUDA"], rows) + [""]
    zeros = [n for n in b.order if n.startswith("zeros/")]
    memset = next((b.get(n, "GB/s") for n in zeros if n.endswith("/cudaMemsetAsync")), None)
    names = {"unified_buffer": "`unified_buffer::zeros`",
             "gpumem_pool": "`gpumem::zeros` + `free`, pool as current resource",
             "cudaMemsetAsync": "`cudaMemsetAsync` on a device buffer",
             "gpumem": "`gpumem::zeros` + `free` over the default resource"}
    zrows = []
    for n in zeros:
        v = b.get(n, "GB/s")
        how = n.split("/")[-1]
        zrows.append([names.get(how, f"`{how}`"), fmt(v),
                      f"{v / memset * 100:.1f} %" if v is not None and memset else "–"])
    if zrows:
        out += table([f"zeros of {size}", "GB/s", "vs `cudaMemsetAsync`"], zrows) + [""]
    sweep = {}
    for n in b.order:
        m = re.match(r"transfer/(h2d|d2h)_pageable/gpumem/threads:(\d+)/chunk:(\d+)MiB$", n)
        if m:
            sweep.setdefault((m.group(1), int(m.group(2))), {})[int(m.group(3))] = b.get(n, "GB/s")
    if sweep:
        chunks = sorted({c for row in sweep.values() for c in row})
        out += ["Staged copies from and to pageable memory by threads and chunk size (GB/s):", ""]
        out += table(["direction, threads"] + [f"{c} MiB" for c in chunks],
                     [[f"{d}, {t}"] + [fmt(sweep[(d, t)].get(c)) for c in chunks] for (d, t) in sorted(sweep)])
        out += [""]
    return out


@google_section("vmm", lambda b: f"{b.statistic()}; µs per call")
def section_vmm_driver(run, b):
    provider = run.get("context", {}).get("gpumem_vmm_provider", "the backend's provider")
    rows = []
    for n in b.order:
        if n.startswith("vmm/piece/"):
            rows.append([n.split("/")[-1]] + [fmt(b.get(n, c)) for c in
                                               ("create_us", "map_us", "unmap_us", "release_us", "us_per_piece")])
    out = [f"Provider: {provider}.", ""]
    out += table(["piece", "create", "map (with access)", "unmap", "release", "all four"], rows) + [""]
    grows = [n for n in b.order if n.startswith("vmm/grow/")]
    if grows:
        slabs, slab_bytes = b.get(grows[0], "slabs"), b.get(grows[0], "slab_bytes")
        what = f"{slabs:.0f} slabs of {fmt_bytes(int(slab_bytes))}" if slabs and slab_bytes else "slabs"
        out += [f"A growth of {what} (create + map), split over host threads:", ""]
        out += table(["threads", "µs per slab", "speedup vs 1 thread"],
                     [[n.split("/")[-1], fmt(b.get(n, "us_per_slab")),
                       fmt_ratio(b.get(n, "speedup_vs_1_thread")) if b.get(n, "speedup_vs_1_thread") else "–"]
                      for n in grows]) + [""]
    return out


def distinct(rows, key):
    """The values of `key` in `rows`, each once, in order of appearance."""
    return list(dict.fromkeys(r[key] for r in rows))


def rows_by(run, key):
    out = {}
    for row in run["rows"]:
        out.setdefault(row[key], []).append(row)
    return out


def log_label(path):
    name = os.path.basename(path)
    for suffix in (".csv.gz", ".csv"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def csv_failures(run):
    return [f"- FAILED `{r.get('workload', r.get('log'))}` on `{r['resource']}`: {r['failure']}"
            for r in run["rows"] if r.get("failure")]


def section_cli_bench(runs):
    run = runs.get("cli_bench")
    if not run:
        return missing("cli_bench")
    out = source(run, "median ns per operation of the timed passes (a `fixed` pair counts as two operations)")
    resources = distinct(run["rows"], "resource")
    rows = []
    for workload, rs in rows_by(run, "workload").items():
        by = {r["resource"]: r for r in rs}
        cells = [by.get(x, {}) for x in resources]
        rows.append([f"`{workload}`"] + ["failed" if c.get("failure") else fmt(c.get("ns_per_op_median")) for c in cells])
    out += table(["workload"] + [f"`{x}`" for x in resources], rows) + [""]
    frag = [r for r in run["rows"] if r["workload"] == "random" and r.get("fragmentation")]
    if frag:
        out += ["Fragmentation (peak upstream / peak live) in `random`: " +
                ", ".join(f"{r['resource']} {r['fragmentation']:.2f}" for r in frag) + ".", ""]
    return out + csv_failures(run)


def refused_allocations(run):
    """A replay run's allocations refused (out of memory), by log and resource: a paragraph, or nothing."""
    refused = [f"{log_label(r['log'])} on `{r['resource']}` {r['failures']}" for r in run["rows"] if r.get("failures")]
    if not refused:
        return []
    return textwrap.wrap("Allocations refused (out of memory), by log and resource: " + ", ".join(refused) + ".",
                         110) + [""]


def section_replay(runs, name="replay"):
    """A replay run's table: each resource's ratio and ns/op per log. `replay_threads` (the logs of several
    threads on as many workers) adds what vmm's workers held at once, the ratio's denominator there, and sets
    vmm's ratio beside the same log's single-threaded one (the `replay` run)."""
    run = runs.get(name)
    if not run:
        return missing(name)
    threaded = name == "replay_threads"
    reps = run["rows"][0].get("runs", 1)
    if threaded:
        note = (f"ns/op: wall time of the workers / operations, median of {reps} replays per resource, the resources "
                "taking turns; ratio: peak bytes taken from the device / the most bytes the workers held at once" +
                (", of the replay with the median ratio (the interleaving differs from replay to replay), with the "
                 "lowest and highest in brackets" if any(r.get("ratio_max") for r in run["rows"]) else ""))
    else:
        timed = "the second replay of each instance, " if run["rows"][0].get("warm") else ""
        note = (f"ns/op: {timed}median of {reps} replays per resource, the resources taking turns; ratio: "
                "peak bytes taken from the device / peak live bytes")
    out = source(run, note)
    resources = distinct(run["rows"], "resource")
    single = {r["log"]: r for r in runs.get("replay", {}).get("rows", []) if r["resource"] == "vmm"} if threaded else {}
    header = ["log", "peak live"] + (["held at once (`vmm`)"] if threaded else [])
    for x in resources:
        header += [f"`{x}` ratio", f"`{x}` ns/op"]
    with_quotient = not threaded and "vmm" in resources and "pool" in resources
    if with_quotient:
        header.append("vmm / pool")
    with_single = "vmm" in resources and bool(single)
    if with_single:
        header += ["`vmm` ratio, one thread", "difference"]
    rows = []
    for log, rs in rows_by(run, "log").items():
        by = {r["resource"]: r for r in rs}
        row = [log_label(log), fmt_bytes(rs[0]["peak_live_bytes"])]
        if threaded:
            held = by.get("vmm", {}).get("held_peak_bytes")
            row.append(fmt_bytes(held) if held else "–")
        for x in resources:
            r = by.get(x, {})
            ratio = r.get("ratio")
            cell = f"{ratio:.3f}" + ("*" if r.get("reserves_upfront") else "") if ratio else "–"
            low, high = r.get("ratio_min"), r.get("ratio_max")
            if threaded and ratio and low and high and high > low:
                cell += f" ({low:.3f} – {high:.3f})"
            row += [cell, fmt(r.get("ns_per_op"))]
        if with_quotient:
            v, p = by["vmm"].get("ns_per_op"), by["pool"].get("ns_per_op")
            row.append(f"**{v / p:.2f}×**" if v and p else "–")
        if with_single:
            one = single.get(log, {}).get("ratio")
            many = by.get("vmm", {}).get("ratio")
            row += [f"{one:.3f}" if one else "–", f"{many - one:+.3f}" if one and many else "–"]
        rows.append(row)
    out += table(header, rows) + [""]
    return out + refused_allocations(run) + csv_failures(run)


def section_vmm_divisors(runs):
    names = sorted((n for n in runs if n.startswith("vmm_divisor_")), key=lambda n: int(n.rsplit("_", 1)[1]),
                   reverse=True)
    if not names:
        return ["_Not in this data: `bash scripts/gpu_check.sh --vmm` fills this section._"]
    logs = []
    for n in names:
        for r in runs[n]["rows"]:
            if log_label(r["log"]) not in logs:
                logs.append(log_label(r["log"]))
    out = []
    for n in names:
        out += [f"`--mapping-divisor {n.rsplit('_', 1)[1]}`:", ""] + source(runs[n])
    rows = []
    for n in names:
        cells = []
        by = {(log_label(r["log"]), r["resource"]): r for r in runs[n]["rows"]}
        for log in logs:
            v, p = by.get((log, "vmm"), {}), by.get((log, "pool"), {})
            if v.get("ratio") and v.get("ns_per_op") and p.get("ns_per_op"):
                cells.append(f"{v['ratio']:.3f}, {v['ns_per_op'] / p['ns_per_op']:.2f}×")
            else:
                cells.append("–")
        rows.append([n.rsplit("_", 1)[1]] + cells)
    out += ["`vmm` ratio, and its ns/op over the pool's in the same call:", ""]
    out += table(["divisor"] + logs, rows) + [""]
    return out


def section_python(runs):
    run = runs.get("python")
    if not run:
        return missing("python")
    ctx = run.get("context", {})
    out = source(run, f"median and minimum ns per pair (Python {ctx.get('python', '?')})")
    sizes = distinct(run["rows"], "size")
    rows = []
    for name, rs in rows_by(run, "name").items():
        by = {r["size"]: r for r in rs}
        cells = []
        for s in sizes:
            r = by.get(s, {})
            cells.append("skipped" if r.get("skipped") else
                         f"{fmt(r.get('median_ns'))} (min {fmt(r.get('min_ns'))})" if r else "–")
        rows.append([f"`{name}`"] + cells)
    out += table(["workload"] + [fmt_bytes(s) for s in sizes], rows) + [""]
    return out


def section_ipc(runs):
    run = runs.get("ipc")
    if not run:
        return missing("ipc")
    out = source(run, "medians; read: GB/s of a device-to-device copy of the whole buffer")
    rows = []
    for r in run["rows"]:
        def us(key):
            return "–" if r.get(key) is None else fmt(r[key])
        rows.append([f"`{r['name']}`", fmt_bytes(r["size"]), us("export_us"), us("import_touch_us"), us("close_us"),
                     fmt(r.get("read_gbps"))])
    out += table(["row", "size", "export µs", "import + first touch µs", "close µs", "read GB/s"], rows) + [""]
    return out


def torch_rows(run):
    """{program: {allocator: row}} of the `torch` run, allocators in the run's order."""
    by = {}
    for r in run["rows"]:
        by.setdefault(r["program"], {})[r["allocator"]] = r
    return by


def section_torch(runs):
    run = runs.get("torch")
    if not run:
        return textwrap.wrap("_Not in this data: `bash scripts/bench.sh --only torch` on a GPU machine with PyTorch "
                             "fills this section._", 110)
    ctx = run.get("context", {})
    out = source(run, f"median time per step (train) or per generated token (generate), peak device memory the "
                      f"process used, largest batch within the budget (Python {ctx.get('python', '?')})")
    for program, rows in torch_rows(run).items():
        base = rows.get("pytorch")
        unit = "ms per step" if program == "train" else "ms per token"
        budget = next((r.get("budget_bytes") for r in rows.values() if r.get("budget_bytes")), None)
        cells = []
        for name, r in rows.items():
            time_ratio = f" ({r['median_ms'] / base['median_ms']:.3f})" if base else ""
            peak_ratio = f" ({r['peak_bytes'] / base['peak_bytes']:.3f})" if base else ""
            runs = r.get("median_ms_runs") or [r["median_ms"]]
            spread = f"{fmt(min(runs))} – {fmt(max(runs))}" if len(runs) > 1 else "one run"
            tensors = r.get("tensor_peak_bytes")
            batch = r.get("largest_batch")
            paired = r.get("paired_ratio_runs") or []
            paired_text = (f"{statistics.median(paired):.3f} ({min(paired):.3f} – {max(paired):.3f})"
                           if paired and name != "pytorch" else "–")
            best = r.get("best_ms")
            best_text = f"{best / base['best_ms']:.3f}" if best and base and base.get("best_ms") else "–"
            cells.append([f"`{name}`", f"{fmt(r['median_ms'])}{time_ratio}", spread, paired_text, best_text,
                          f"{fmt_bytes(r['peak_bytes'])}{peak_ratio}", "–" if tensors is None else fmt_bytes(tensors),
                          "–" if batch is None else str(batch)])
        out += [f"`{program}` (ratios to `pytorch` in brackets):", ""]
        out += table(["allocator", f"median {unit}", "runs' medians", "paired with `pytorch` (rounds)",
                      "best of rounds", "peak device memory", "peak of live tensors",
                      f"largest batch in {fmt_bytes(budget)}" if budget else "largest batch"], cells) + [""]
    return out


def torch_targets(run):
    """Target rows for the `torch` run: gpumem's default against the better of PyTorch's two configurations."""
    rows = []
    for program, by in torch_rows(run).items():
        ours, theirs = by.get("gpumem"), [by[n] for n in ("pytorch", "expandable") if n in by]
        if not ours or not theirs:
            continue
        best_peak = min(r["peak_bytes"] for r in theirs)
        q = ours["peak_bytes"] / best_peak
        floor = max((r.get("tensor_peak_bytes") or 0 for r in by.values()), default=0) / best_peak
        reach = f" (live tensors alone: {floor:.3f}×)" if floor else ""
        rows.append([f"`torch` {program}, `gpumem` default", "peak ≤ 0.9× PyTorch's best configuration",
                     f"{q:.3f}×{reach}", verdict(run, q <= 0.9)])
        if "pytorch" in by:
            base = by["pytorch"]
            t = ours["median_ms"] / base["median_ms"]
            paired = ours.get("paired_ratio_runs") or []
            if ours.get("best_ms") and base.get("best_ms") and paired:
                best = ours["best_ms"] / base["best_ms"]
                rows.append(["", "time within 2 % of `pytorch`",
                             f"best of rounds {best:.3f}×; paired median {statistics.median(paired):.3f}× "
                             f"({min(paired):.3f} – {max(paired):.3f}); medians {t:.3f}×",
                             verdict(run, best <= 1.02)])
            else:
                rows.append(["", "time within 2 % of `pytorch`", f"{t:.3f}×", verdict(run, t <= 1.02)])
        batches = [r.get("largest_batch") for r in theirs]
        if ours.get("largest_batch") is not None and all(b is not None for b in batches):
            rows.append(["", "a larger batch fits than with either", f"{ours['largest_batch']} vs {max(batches)}",
                         verdict(run, ours["largest_batch"] > max(batches))])
    return rows


# ---- targets ------------------------------------------------------------------------------------------------

def on_gpu(run):
    return run is not None and run.get("context", {}).get("gpumem_backend") == "cuda"


def verdict(run, ok):
    if ok is None:
        return "–"
    if not on_gpu(run):
        return "not a GPU run"
    return "**yes**" if ok else "**no**"


def section_targets(runs):
    rows = []
    alloc = runs.get("alloc")
    if alloc:
        b = Benchmarks(alloc)
        _, resources = grid(b)
        ours = [r for r in resources if r not in PEERS and not r.startswith("selftest")]

        def best(workloads, counter):
            """(worst figure over `workloads`, resource) of the resource whose worst is smallest."""
            scored = []
            for r in ours:
                vals = [b.get(bench_name(w, r), counter) for w in workloads]
                if all(v is not None for v in vals):
                    scored.append((max(vals), r))
            return min(scored) if scored else (None, None)
        for label, workloads, counter, limit in (
                ("`fixed` 256 B – 64 KiB", ["fixed/256B", "fixed/4KiB", "fixed/64KiB"], "ns_per_pair", 50),
                ("`random`", ["random"], "ns_per_op", 100),
                ("`random_mt/16`", ["random_mt/16"], "ns_per_op", 30)):
            v, r = best(workloads, counter)
            rows.append([label, f"≤ {limit} ns", f"{fmt(v)} ns (`{r}`)" if v is not None else "–",
                         verdict(alloc, v <= limit if v is not None else None)])
        over = b.get(bench_name("random_streams/16x4", "vmm"), "fragmentation_over_random")
        if over is not None:
            rows.append(["`random_streams/16x4`, `vmm`", "fragmentation ≤ `random`'s + 0.05", f"{over:+.3f}",
                         verdict(alloc, over <= 0.05)])
    replay = runs.get("replay")
    if replay:
        by = {(r["log"], r["resource"]): r for r in replay["rows"]}
        logs = [l for l in dict.fromkeys(r["log"] for r in replay["rows"])
                if log_label(l).startswith(PYTORCH_LOGS) and (l, "vmm") in by and (l, "pool") in by]
        if logs:
            ratios = [by[(l, "vmm")]["ratio"] for l in logs]
            quotients = [by[(l, "vmm")]["ns_per_op"] / by[(l, "pool")]["ns_per_op"] for l in logs]
            rows.append(["`replay` of the PyTorch logs, `vmm`", "peak physical / peak live ≤ 1.05",
                         f"{min(ratios):.3f} – {max(ratios):.3f}", verdict(replay, max(ratios) <= 1.05)])
            rows.append(["", "≤ 1.5× the pool's ns/op", f"{min(quotients):.2f}× – {max(quotients):.2f}×",
                         verdict(replay, max(quotients) <= 1.5)])
    threads, replay = runs.get("replay_threads"), runs.get("replay")
    if threads and replay:
        one = {r["log"]: r["ratio"] for r in replay["rows"] if r["resource"] == "vmm" and r.get("ratio")}
        # Every replay counts: the worst of each log's (ratio_max; older data has only the one ratio).
        differences = [(r.get("ratio_max") or r["ratio"]) - one[r["log"]] for r in threads["rows"]
                       if r["resource"] == "vmm" and r.get("ratio") and r["log"] in one]
        if differences:
            reps = threads["rows"][0].get("runs", 1)
            ranged = any(r.get("ratio_max") for r in threads["rows"])
            rows.append(["`replay --threads 0` of the logs of several threads, `vmm`",
                         "ratio ≤ one thread's + 0.05", f"{max(differences):+.3f}" +
                         (f" (the worst of {reps} replays)" if reps > 1 and ranged else ""),
                         verdict(threads, max(differences) <= 0.05)])
    transfer = runs.get("transfer")
    if transfer:
        b = Benchmarks(transfer)
        pinned = [(b.get(f"transfer/{k}/unified_buffer", "GB/s"), b.get(f"transfer/{k}/cudaMemcpyAsync", "GB/s"))
                  for k in ("h2d_pinned", "d2h_pinned")]
        if all(u and c for u, c in pinned):
            q = [u / c for u, c in pinned]
            rows.append(["`transfer`, pinned unified sync", "≥ 95 % of `cudaMemcpyAsync`",
                         f"{min(q) * 100:.1f} %", verdict(transfer, min(q) >= 0.95)])
        pageable = [b.get(f"transfer/{k}/gpumem", "GB/s") for k in ("h2d_pageable", "d2h_pageable")]
        if all(pageable):
            rows.append(["`transfer`, staged pageable copies", "≥ 35 GB/s each way",
                         f"{fmt(min(pageable))} GB/s", verdict(transfer, min(pageable) >= 35)])
        zeros = {n.split("/")[-1]: b.get(n, "GB/s") for n in b.order if n.startswith("zeros/")}
        if zeros.get("unified_buffer") and zeros.get("cudaMemsetAsync"):
            q = zeros["unified_buffer"] / zeros["cudaMemsetAsync"]
            rows.append(["`zeros`, `unified_buffer`", "≥ 95 % of `cudaMemsetAsync`", f"{q * 100:.1f} %",
                         verdict(transfer, q >= 0.95)])
    python = runs.get("python")
    if python:
        pool = [r["median_ns"] for r in python["rows"]
                if r["name"] == "gpumem.alloc+free (pool)" and not r.get("skipped")]
        if pool:
            rows.append(["`python`, `gpumem.alloc` + `free` on a pool", "≤ 300 ns per pair",
                         f"{fmt(max(pool))} ns", verdict(python, max(pool) <= 300)])
    if runs.get("torch"):
        rows += torch_targets(runs["torch"])
    if not rows:
        return ["_Not in this data: `bash scripts/gpu_check.sh --bench` fills this section._"]
    return table(["workload", "target", "measured (best gpumem resource, worst case)", "met?"], rows,
                 right_from=4) + [""]


def section_machines(runs):
    machines = {}
    for run in runs.values():
        ctx = run.get("context", {})
        key = (ctx.get("gpumem_device", "unknown"), ctx.get("gpumem_backend", "unknown"))
        machines.setdefault(key, []).append(run["name"])
    out = []
    for (device, backend), names in machines.items():
        out.append(f"- {device} (gpumem backend: {backend}): " + ", ".join(f"`{n}`" for n in names))
    if any(backend != "cuda" for _, backend in machines):
        out += [""] + textwrap.wrap(
            "**Host backend figures are not GPU figures:** there \"device\" memory is host memory and the streams "
            "and pools are emulated. They compare versions of gpumem on one machine, for regression tracking only, "
            "and the `cuda` and `cuda_async_default` columns are the host backend's emulations, not CUDA.", 110)
    return out + [""]


SECTIONS = {
    "machines": section_machines,
    "targets": section_targets,
    "alloc": section_alloc,
    "adaptors": section_adaptors,
    "plain": section_plain,
    "cli_bench": section_cli_bench,
    "replay": section_replay,
    "replay_warm": lambda runs: section_replay(runs, "replay_warm"),
    "replay_threads": lambda runs: section_replay(runs, "replay_threads"),
    "vmm_divisors": section_vmm_divisors,
    "vmm": section_vmm_driver,
    "transfer": section_transfer,
    "python": section_python,
    "ipc": section_ipc,
    "torch": section_torch,
}


def has_failures(runs):
    for run in runs.values():
        if run["kind"] == "google_benchmark" and Benchmarks(run).errors:
            return True
        if run["kind"] == "csv" and any(r.get("failure") for r in run["rows"]):
            return True
    return False


def render(runs, template_text):
    out = []
    for line in template_text.splitlines():
        m = re.fullmatch(r"\{\{(\w+)\}\}", line.strip())
        if not m:
            out.append(line)
            continue
        if m.group(1) not in SECTIONS:
            raise ValueError(f"template: unknown section {{{{{m.group(1)}}}}} (known: {', '.join(SECTIONS)})")
        out += SECTIONS[m.group(1)](runs)
    page = []
    for line in out:  # one blank line between blocks, none at the end
        if line == "" and (not page or page[-1] == ""):
            continue
        page.append(line)
    while page and page[-1] == "":
        page.pop()
    return "\n".join(page) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", help="folders with a bench.json, or bench.json files")
    parser.add_argument("--template", default=TEMPLATE)
    args = parser.parse_args(argv)
    try:
        runs = load_runs(args.inputs)
        with open(args.template, encoding="utf-8") as f:
            page = render(runs, f.read())
    except (OSError, ValueError, KeyError) as e:
        print(f"performance_page.py: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(page)
    return 1 if has_failures(runs) else 0


if __name__ == "__main__":
    sys.exit(main())
