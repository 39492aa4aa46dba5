#!/usr/bin/env python3
"""Adds one benchmark run to a bundle of results (standard library only).

    python3 scripts/bench_record.py BUNDLE.json --name NAME --kind KIND --command "CMD" INPUT

The bundle is the one file that `scripts/bench.sh` (and `scripts/gpu_check.sh --bench/--vmm`) writes and that
`scripts/performance_page.py` reads. It is created when missing; a run whose name is already in it replaces
that run. Layout:

    {"format": "gpumem-bench-bundle/1",
     "runs": [{"name": "alloc", "kind": "google_benchmark", "command": "...", "context": {...},
               "benchmarks": [...]},                                # KIND google_benchmark
              {"name": "replay", "kind": "csv", ..., "rows": [{"log": ..., "resource": ..., ...}]},
              {"name": "python", "kind": "python_bench", ..., "rows": [...]}]}

KIND:
  google_benchmark  INPUT is Google Benchmark's JSON (--benchmark_out_format=json): its context and
                    benchmarks are kept as they are.
  csv               INPUT is CSV with a header line (`gpumem replay --csv`, `gpumem bench --csv`): one row per
                    line, numbers as numbers, empty fields as null.
  python_bench      INPUT is benchmarks/python/bench_python_alloc.py's --json output: its rows.

Every run's context has the time of the recording, the host's name and CPU count, the commit, and the
device and backend: Google Benchmark's own context names them (gpumem_device, gpumem_backend); other runs
take them from --device/--backend, else from a Google Benchmark run already in the bundle (the same machine),
else say "unknown". A missing or empty INPUT is an error (exit 1), so that a failed run cannot pass as data.
"""

import argparse
import csv
import datetime
import json
import os
import platform
import subprocess
import sys

FORMAT = "gpumem-bench-bundle/1"


def number(text):
    if text == "":
        return None
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def read_csv(path):
    with open(path, encoding="utf-8", newline="") as f:
        rows = [{k: number(v) for k, v in row.items()} for row in csv.DictReader(f)]
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def commit():
    if os.environ.get("GPUMEM_COMMIT"):  # where the tree was copied without its history (a remote GPU machine)
        return os.environ["GPUMEM_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], capture_output=True).returncode != 0
        return head.stdout.strip() + (" with local changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load_bundle(path):
    if not os.path.exists(path):
        return {"format": FORMAT, "runs": []}
    with open(path, encoding="utf-8") as f:
        bundle = json.load(f)
    if bundle.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} file (format: {bundle.get('format')!r})")
    return bundle


def machine_from(bundle):
    for run in bundle["runs"]:
        ctx = run.get("context", {})
        if run["kind"] == "google_benchmark" and "gpumem_device" in ctx:
            return ctx["gpumem_device"], ctx.get("gpumem_backend", "unknown")
    return None


def make_run(args, bundle):
    context = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host_name": platform.node(),
        "num_cpus": os.cpu_count(),
    }
    run = {"name": args.name, "kind": args.kind, "command": args.command}
    if args.kind == "google_benchmark":
        with open(args.input, encoding="utf-8") as f:
            data = json.load(f)
        if not data.get("benchmarks"):
            raise ValueError(f"{args.input}: no benchmarks")
        context.update(data.get("context", {}))
        run["benchmarks"] = data["benchmarks"]
    elif args.kind == "csv":
        run["rows"] = read_csv(args.input)
    else:
        with open(args.input, encoding="utf-8") as f:
            data = json.load(f)
        if not data.get("results"):
            raise ValueError(f"{args.input}: no results")
        context["python"] = data.get("python", "unknown")
        context.setdefault("gpumem_backend", data.get("backend", "unknown"))
        run["rows"] = data["results"]
    known = machine_from(bundle) or ("unknown", "unknown")
    context.setdefault("gpumem_device", args.device or known[0])
    context["gpumem_backend"] = args.backend or context.get("gpumem_backend") or known[1]
    context["gpumem_commit"] = commit()
    run["context"] = context
    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bundle")
    parser.add_argument("input")
    parser.add_argument("--name", required=True, help="the run's name (alloc, replay, ...)")
    parser.add_argument("--kind", required=True, choices=("google_benchmark", "csv", "python_bench"))
    parser.add_argument("--command", required=True, help="the command that produced INPUT")
    parser.add_argument("--device", help="the device's name (default: from the bundle)")
    parser.add_argument("--backend", help="gpumem's backend (default: from the input or the bundle)")
    args = parser.parse_args(argv)
    try:
        bundle = load_bundle(args.bundle)
        run = make_run(args, bundle)
    except (OSError, ValueError) as e:
        print(f"bench_record.py: {e}", file=sys.stderr)
        return 1
    bundle["runs"] = [r for r in bundle["runs"] if r["name"] != run["name"]] + [run]
    tmp = args.bundle + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(bundle, f, indent=1)
        f.write("\n")
    os.replace(tmp, args.bundle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
