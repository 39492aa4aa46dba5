#!/usr/bin/env python3
"""scripts/performance_page.py and scripts/bench_record.py on the committed sample (standard library only).

    python3 scripts/tests/test_performance_page.py

data/bench.json is a real bundle, recorded on the host backend by `bash scripts/bench.sh --quick` (and the
transfer benchmark's --smoke run), trimmed to a few benchmarks per run, their median aggregates and the
fields the page reads; its `torch` run is a fixture written for the tests (PyTorch's programs need a GPU), with
invented figures. The tests check that the page has every section and table, that its figures are the
JSON's (a changed figure changes the page), and that failures and missing runs show. Exit status 0 when
every test passes.
"""

import copy
import csv
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.dirname(HERE)
SAMPLE = os.path.join(HERE, "data", "bench.json")
PAGE = os.path.join(SCRIPTS, "performance_page.py")
RECORD = os.path.join(SCRIPTS, "bench_record.py")


def run(script, *args):
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True)


def sample():
    with open(SAMPLE, encoding="utf-8") as f:
        return json.load(f)


def runs_of(bundle):
    return {r["name"]: r for r in bundle["runs"]}


def median(run, name, counter):
    """The median aggregate's `counter` of benchmark `name` (run_name) in a Google Benchmark run."""
    for b in run["benchmarks"]:
        if b.get("run_name", b["name"]) == name and b.get("aggregate_name", "median") == "median" and counter in b:
            return b[counter]
    raise KeyError(f"{name} {counter}")


def page_of(bundle):
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "bench.json"), "w", encoding="utf-8") as f:
            json.dump(bundle, f)
        result = run(PAGE, d)
    return result


class PerformancePage(unittest.TestCase):
    def setUp(self):
        self.bundle = sample()
        self.runs = runs_of(self.bundle)
        result = run(PAGE, os.path.dirname(SAMPLE))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.page = result.stdout

    def test_every_section_has_its_table(self):
        for heading in ("## Targets", "## Allocation: `gpumem_bench_alloc`", "## The plain API", "## Adaptor overhead",
                        "## `gpumem bench`", "## Fragmentation on real logs", "### In steady state: `gpumem replay --warm`",
                        "### On the log's threads: `gpumem replay --threads 0`",
                        "### Pieces that grow with the pool",
                        "### What a growth costs", "## Transfers and zeros", "## Python: one allocation + free pair",
                        "## Memory shared between processes", "## PyTorch programs"):
            self.assertIn(heading, self.page)
            section = self.page.split(heading, 1)[1].split("\n## ", 1)[0]
            self.assertIn("| --- |", section, f"no table under {heading}")
        self.assertNotIn("{{", self.page)
        self.assertNotIn("Not in this data", self.page)

    def test_each_table_names_its_command_and_device(self):
        for name, r in self.runs.items():
            self.assertIn(f"- command: `{r['command']}`", self.page, name)
        device = self.runs["alloc"]["context"]["gpumem_device"]
        self.assertIn(f"- device: {device} (gpumem backend: host)", self.page)
        self.assertIn("Host backend figures are not GPU figures", self.page)
        self.assertIn("not a GPU run", self.page)  # the targets are not judged on the host backend

    def test_figures_come_from_the_json(self):
        alloc = self.runs["alloc"]
        pool = median(alloc, "fixed/pool/256B/min_time:0.050/real_time", "ns_per_pair")
        peer = median(alloc, "fixed/cuda_async_default/256B/min_time:0.050/real_time", "ns_per_pair")
        row = next(line for line in self.page.splitlines() if line.startswith("| `fixed/256B` |"))
        self.assertIn(f"{pool:.0f}" if pool >= 100 else f"{pool:.1f}", row)
        self.assertIn(f"({pool / peer:.2f}×)", row)

        replay = self.runs["replay"]["rows"]
        vmm = next(r for r in replay if r["resource"] == "vmm")
        pool_row = next(r for r in replay if r["resource"] == "pool")
        line = next(line for line in self.page.splitlines() if line.startswith("| thrust_pipeline |"))
        self.assertIn(f"{vmm['ratio']:.3f}", line)
        self.assertIn(f"**{vmm['ns_per_op'] / pool_row['ns_per_op']:.2f}×**", line)

        python = next(r for r in self.runs["python"]["rows"] if r["name"] == "python no-op call" and r["size"] == 256)
        self.assertIn(f"{python['median_ns']:.1f} (min {python['min_ns']:.1f})", self.page)

    def test_a_changed_figure_changes_the_page(self):
        bundle = copy.deepcopy(self.bundle)
        for b in runs_of(bundle)["plain"]["benchmarks"]:
            if b.get("run_name", "").startswith("plain/alloc_free/256B") and "ns_per_pair" in b:
                b["ns_per_pair"] = 4321.0
        result = page_of(bundle)
        self.assertEqual(result.returncode, 0, result.stderr)
        row = next(line for line in result.stdout.splitlines() if line.startswith("| 256B |"))
        self.assertIn("4,321", row)
        self.assertNotIn("4,321", self.page)

    def test_a_failed_benchmark_fails_and_shows(self):
        bundle = copy.deepcopy(self.bundle)
        b = runs_of(bundle)["alloc"]["benchmarks"][0]
        b["error_occurred"] = True
        b["error_message"] = "injected failure"
        result = page_of(bundle)
        self.assertEqual(result.returncode, 1)
        self.assertIn("injected failure", result.stdout)
        self.assertIn("FAILED", result.stdout)

    def test_a_missing_run_says_what_fills_it(self):
        bundle = copy.deepcopy(self.bundle)
        bundle["runs"] = [r for r in bundle["runs"] if r["name"] != "transfer"]
        result = page_of(bundle)
        self.assertEqual(result.returncode, 0, result.stderr)
        section = result.stdout.split("## Transfers and zeros", 1)[1].split("\n## ", 1)[0]
        self.assertIn("Not in this data: the run `transfer`", section)

    def test_the_torch_section_compares_each_allocator_with_pytorchs(self):
        section = self.page.split("## PyTorch programs", 1)[1].split("\n## ", 1)[0]
        rows = [r for r in self.runs["torch"]["rows"] if r["program"] == "train"]
        base = next(r for r in rows if r["allocator"] == "pytorch")
        for r in rows:
            self.assertIn(f"| `{r['allocator']}` |", section)
            self.assertIn(f"({r['peak_bytes'] / base['peak_bytes']:.3f})", section)
        targets = self.page.split("## Targets", 1)[1].split("\n## ", 1)[0]
        self.assertIn("`torch` train, `gpumem` default", targets)

    def test_the_torch_time_target_is_judged_on_the_best_of_rounds_beside_the_paired_ratio(self):
        for gpumem_best, verdict in ((101.5, "**yes**"), (103.0, "**no**")):
            bundle = copy.deepcopy(self.bundle)
            for r in bundle["runs"]:
                r["context"]["gpumem_backend"] = "cuda"
            torch = next(r for r in bundle["runs"] if r["name"] == "torch")
            for row in torch["rows"]:
                if row["program"] == "train" and row["allocator"] == "pytorch":
                    row["best_ms"] = 100.0
                elif row["program"] == "train" and row["allocator"] == "gpumem":
                    row["best_ms"] = gpumem_best
                    row["paired_ratio_runs"] = [1.04, 1.0, 1.2]
            result = page_of(bundle)
            self.assertEqual(result.returncode, 0, result.stderr)
            targets = result.stdout.split("## Targets", 1)[1].split("\n## ", 1)[0]
            line = next(l for l in targets.splitlines() if "best of rounds" in l)
            self.assertIn(f"best of rounds {gpumem_best / 100:.3f}×; paired median 1.040× (1.000 – 1.200)", line)
            self.assertTrue(line.endswith(f"{verdict} |"), line)
            section = result.stdout.split("## PyTorch programs", 1)[1].split("\n## ", 1)[0]
            self.assertIn(f"| 1.040 (1.000 – 1.200) | {gpumem_best / 100:.3f} |", section)

    def test_targets_are_judged_on_a_gpu_run(self):
        bundle = copy.deepcopy(self.bundle)
        for r in bundle["runs"]:
            r["context"]["gpumem_backend"] = "cuda"
        result = page_of(bundle)
        targets = result.stdout.split("## Targets", 1)[1].split("\n## ", 1)[0]
        self.assertNotIn("not a GPU run", targets)
        self.assertRegex(targets, r"\*\*(yes|no)\*\*")
        self.assertNotIn("Host backend figures are not GPU figures", result.stdout)

    def test_threaded_replays_show_the_ratios_range_and_the_target_takes_the_worst(self):
        bundle = copy.deepcopy(self.bundle)
        for r in bundle["runs"]:
            r["context"]["gpumem_backend"] = "cuda"
        runs = runs_of(bundle)
        threaded = next(r for r in runs["replay_threads"]["rows"] if r["resource"] == "vmm")
        for resource in ("pool", "vmm"):  # the same log on one thread
            first = next(r for r in runs["replay"]["rows"] if r["resource"] == resource)
            runs["replay"]["rows"].append(dict(first, log=threaded["log"], ratio=1.0200))
        threaded.update(ratio=1.0300, ratio_min=1.0250, ratio_max=1.0900)
        result = page_of(bundle)
        self.assertEqual(result.returncode, 0, result.stderr)
        section = result.stdout.split("### On the log's threads", 1)[1].split("\n### ", 1)[0]
        row = next(line for line in section.splitlines() if line.startswith("| pytorch_unet_train |"))
        self.assertIn("1.030 (1.025 – 1.090)", row)
        self.assertIn("+0.010", row)  # the difference column: the median replay's
        targets = result.stdout.split("## Targets", 1)[1].split("\n## ", 1)[0]
        line = next(l for l in targets.splitlines() if "replay --threads 0" in l)
        self.assertIn("+0.070 (the worst of 3 replays)", line)
        self.assertIn("**no**", line)

    def test_sampled_fragmentation_shows_its_range(self):
        bundle = copy.deepcopy(self.bundle)
        for b in runs_of(bundle)["alloc"]["benchmarks"]:
            if b.get("run_name", b["name"]).startswith("random_mt/binning/16/") and "fragmentation" in b:
                b.update(fragmentation=9.5, fragmentation_min=9.25, fragmentation_max=9.75, fragmentation_samples=5)
        result = page_of(bundle)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("9.50 (9.25 – 9.75)", result.stdout)
        self.assertIn("the median, the lowest and highest in brackets", result.stdout)
        self.assertNotIn("the lowest and highest in brackets", self.page.split("## Allocation", 1)[1].split("\n## ", 1)[0])

    def test_an_input_that_is_not_a_bundle_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bench.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump({"benchmarks": []}, f)
            result = run(PAGE, path)
        self.assertEqual(result.returncode, 1)
        self.assertIn("not a gpumem-bench-bundle/1 file", result.stderr)


class BenchRecord(unittest.TestCase):
    def test_csv_becomes_a_run_with_the_machine_of_the_bundle(self):
        with tempfile.TemporaryDirectory() as d:
            bundle = os.path.join(d, "bench.json")
            alloc = runs_of(sample())["alloc"]
            gb = os.path.join(d, "alloc.json")
            with open(gb, "w", encoding="utf-8") as f:
                json.dump({"context": alloc["context"], "benchmarks": alloc["benchmarks"]}, f)
            self.assertEqual(run(RECORD, bundle, gb, "--name", "alloc", "--kind", "google_benchmark",
                                 "--command", "gpumem_bench_alloc").returncode, 0)
            rows = os.path.join(d, "replay.csv")
            with open(rows, "w", encoding="utf-8", newline="") as f:
                w = csv.writer(f)
                w.writerow(["log", "resource", "ns_per_op", "failure"])
                w.writerow(["a.csv", "pool", "12.5", ""])
            result = run(RECORD, bundle, rows, "--name", "replay", "--kind", "csv", "--command", "gpumem replay --csv")
            self.assertEqual(result.returncode, 0, result.stderr)
            with open(bundle, encoding="utf-8") as f:
                recorded = runs_of(json.load(f))
        self.assertEqual(recorded["replay"]["rows"], [{"log": "a.csv", "resource": "pool", "ns_per_op": 12.5,
                                                        "failure": None}])
        self.assertEqual(recorded["replay"]["command"], "gpumem replay --csv")
        self.assertEqual(recorded["replay"]["context"]["gpumem_device"], alloc["context"]["gpumem_device"])
        self.assertEqual(recorded["alloc"]["benchmarks"], alloc["benchmarks"])

    def test_an_empty_input_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            empty = os.path.join(d, "empty.csv")
            open(empty, "w").close()
            bundle = os.path.join(d, "bench.json")
            result = run(RECORD, bundle, empty, "--name", "replay", "--kind", "csv", "--command", "x")
            self.assertEqual(result.returncode, 1)
            self.assertIn("no rows", result.stderr)
            self.assertFalse(os.path.exists(bundle))


if __name__ == "__main__":
    unittest.main()
