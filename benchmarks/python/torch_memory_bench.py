"""PyTorch's allocators against gpumem's on two real programs: step time, peak device memory, largest batch.

    python3 benchmarks/python/torch_memory_bench.py [--json OUT.json] [--markdown OUT.md] [--quick]
        [--allocators LABEL,...] [--fit-allocators LABEL,...] [--programs train,generate] [--budget BYTES]
        [--rounds N] [--warm-every-shape]

Each (program, allocator) runs in a process of its own (torch_programs.py): PyTorch's allocator can be chosen
only once per process, and a fresh process starts every allocator from an empty device. Allocators (labels):

    pytorch       PyTorch's caching allocator, default settings
    expandable    PyTorch's caching allocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    gpumem        gpumem.torch.install(): gpumem's default for PyTorch
    gpumem-vmm-2m gpumem's VMM pool with 2 MiB slabs (resource:vmm,slab_size:2MiB)
    gpumem-async  gpumem over cudaMallocAsync (resource:async)

Per allocator and program: the median step time (train: one optimizer step; generate: one generated token) after
the warm-up, the peak device memory the process used (cuMemGetInfo sampled every millisecond, minus the memory in
use before the first tensor), the peak of live tensors (the allocator's max_memory_allocated: no allocator can
need less), and, for the --fit-allocators, the largest batch that fits in --budget bytes of
device memory (the rest taken by a cudaMalloc ballast before the first tensor; each probe a process running the
program at its longest sequence; found by doubling, then bisection). Figures are for the device it runs on.

Step times of one process vary by several per cent from process to process (kernel selection, clocks, where the
host threads run), more than the allocators differ. So each allocator runs --rounds times, the allocators taking
turns (A B C A B C ...), and a row gives the median of the runs' medians with the spread of the runs; the peaks
are the largest of the runs'. Every run follows the same schedule of shapes, so runs pair up: a row's paired
ratio is the median, over the rounds, of its run's total measured time over the total of the pytorch run of
the same round (its neighbour in time), with the rounds' smallest and largest ratio. And since noise only ever
adds time, a row's best-of-rounds time is the sum over the steps of each step's fastest run: its ratio to
pytorch's compares what each allocator lets the same steps reach.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "torch_programs.py"
GiB = 1 << 30

ALLOCATORS = {
    "pytorch": ("pytorch", {}),
    "expandable": ("pytorch", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    "gpumem": ("gpumem", {}),
    "gpumem-vmm-2m": ("gpumem:resource:vmm,slab_size:2MiB", {}),
    "gpumem-async": ("gpumem:resource:async", {}),
}
OOM_EXIT = 3
WARMUP = {"train": 5, "generate": 1}  # steps / requests left out of the times (kernel selection, first growth)
FIT_START = {"train": 4, "generate": 16}  # the first batch the largest-batch search tries
RECORDED = ("median_ms", "mean_ms", "peak_bytes", "allocator_peak_bytes", "tensor_peak_bytes", "steps",
            "median_ms_runs", "step_ms_runs", "paired_ratio", "paired_ratio_runs", "best_ms")


def run_program(program: str, label: str, extra: List[str], timeout: float = 300) -> Optional[dict]:
    """One process of torch_programs.py; its JSON result, or None when it ran out of memory."""
    allocator, env = ALLOCATORS[label]
    environment = dict(os.environ)
    environment.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    environment.pop("GPUMEM_TORCH_ALLOC_CONF", None)
    environment.update(env)
    done = subprocess.run([sys.executable, str(PROGRAM), program, allocator, *extra], capture_output=True,
                          text=True, env=environment, timeout=timeout)
    if done.returncode == OOM_EXIT:
        return None
    if done.returncode != 0:
        raise RuntimeError(f"{program} with {label} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def median(values: List[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def combine_runs(runs: List[dict]) -> dict:
    """One row of several runs of one (program, allocator): the median of their medians, their spread, and the
    largest of their peaks."""
    def largest(key):
        values = [run[key] for run in runs if run.get(key) is not None]
        return max(values) if values else None

    return {**runs[-1], "median_ms": median([run["median_ms"] for run in runs]),
            "mean_ms": sum(run["mean_ms"] for run in runs) / len(runs),
            "median_ms_runs": [run["median_ms"] for run in runs],
            "step_ms_runs": [run.get("step_ms") for run in runs], "best_ms": best_of_rounds(runs),
            "peak_bytes": largest("peak_bytes"),
            "allocator_peak_bytes": largest("allocator_peak_bytes"), "tensor_peak_bytes": largest("tensor_peak_bytes")}


def best_of_rounds(runs: List[dict]) -> Optional[float]:
    """The sum over the steps of each step's fastest time among the runs (ms), or None without step times."""
    steps = [run.get("step_ms") for run in runs]
    if not steps or any(not s for s in steps) or len({len(s) for s in steps}) != 1:
        return None
    return sum(min(times) for times in zip(*steps))


def paired_ratios(runs: List[dict], base_runs: List[dict]) -> List[float]:
    """Per round, the run's total measured step time over the base run's of the same round: both ran the same
    schedule, one after the other, so a drift of the machine between rounds cancels. Rounds without step times
    on both sides are left out."""
    ratios = []
    for run, base in zip(runs, base_runs):
        steps, base_steps = run.get("step_ms"), base.get("step_ms")
        if not steps or not base_steps or len(steps) != len(base_steps):
            continue
        ratios.append(sum(steps) / sum(base_steps))
    return ratios


def largest_fitting(fits: Callable[[int], bool], start: int = 4, limit: int = 512) -> int:
    """The largest n in [1, limit] with fits(n), for a monotone fits(); 0 when even 1 does not fit.

    Doubles from `start` until a failure (or `limit`), then bisects between the last success and the failure.
    """
    good, bad = 0, None
    n = max(1, min(start, limit))
    while bad is None:
        if fits(n):
            good = n
            if n == limit:
                return n
            n = min(2 * n, limit)
        else:
            bad = n
    if good == 0:  # the start failed: search below it
        low, high = 0, bad
    else:
        low, high = good, bad
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


def parse_budgets(text: str) -> Dict[str, int]:
    """"train:16GiB,generate:4GiB" -> {"train": 16 GiB, "generate": 4 GiB} (units B, KiB, MiB, GiB)."""
    units = {"GiB": GiB, "MiB": 1 << 20, "KiB": 1 << 10, "B": 1}
    budgets = {}
    for item in filter(None, text.split(",")):
        program, _, size = item.partition(":")
        unit = next((u for u in units if size.endswith(u)), None)
        number = size[: -len(unit)] if unit else size
        try:
            budgets[program] = int(float(number) * units[unit or "B"])
        except ValueError:
            raise SystemExit(f"torch_memory_bench: bad budget {item!r} (expected PROGRAM:SIZE, e.g. train:16GiB)")
    return budgets


def markdown(results: Dict[str, Dict[str, dict]], fits: Dict[str, Dict[str, int]], budgets: Dict[str, int]) -> str:
    """The results as one markdown table per program, ratios against PyTorch's default allocator."""
    lines = []
    for program, rows in results.items():
        unit = "ms per step" if program == "train" else "ms per token"
        budget = budgets.get(program, 0)
        lines += [f"**{program}**", "",
                  f"| allocator | median {unit} | runs | vs pytorch | paired vs pytorch (rounds' range) | "
                  f"best of rounds vs pytorch | peak device memory | vs pytorch | peak of live tensors | "
                  f"largest batch in {budget / GiB:g} GiB |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        base = rows.get("pytorch")
        for label, row in rows.items():
            time_ratio = f"{row['median_ms'] / base['median_ms']:.3f}" if base else "-"
            peak_ratio = f"{row['peak_bytes'] / base['peak_bytes']:.3f}" if base else "-"
            runs = row.get("median_ms_runs") or [row["median_ms"]]
            spread = f"{min(runs):.2f}-{max(runs):.2f}" if len(runs) > 1 else "1"
            tensors = row.get("tensor_peak_bytes")
            fit = fits.get(program, {}).get(label)
            paired = row.get("paired_ratio_runs") or []
            paired_text = (f"{median(paired):.3f} ({min(paired):.3f}-{max(paired):.3f}, {len(paired)} rounds)"
                           if paired else "-")
            best, base_best = row.get("best_ms"), (base or {}).get("best_ms")
            best_text = f"{best / base_best:.3f}" if best and base_best else "-"
            lines.append(f"| {label} | {row['median_ms']:.2f} | {spread} | {time_ratio} | {paired_text} | {best_text} | "
                         f"{row['peak_bytes'] / GiB:.2f} GiB | {peak_ratio} | "
                         f"{'-' if tensors is None else f'{tensors / GiB:.2f} GiB'} | {'-' if fit is None else fit} |")
        lines.append("")
    return "\n".join(lines)


def write(args, results, fits, budgets, steps) -> None:
    """The results so far: --markdown's table and --json's rows (bench_record.py's python_bench input)."""
    if args.markdown:
        args.markdown.write_text(markdown(results, fits, budgets))
    if args.json:  # the device and versions as the programs saw them (this process never touches the GPU)
        first = next((row for by in results.values() for row in by.values()), {})
        rows = [{"program": program, "allocator": label, **{k: row.get(k) for k in RECORDED},
                 "largest_batch": fits.get(program, {}).get(label), "budget_bytes": budgets.get(program)}
                for program, by in results.items() for label, row in by.items()]
        if args.json.exists():  # keep the rows of programs this run does not run (programs run in separate calls)
            try:
                kept = [row for row in json.loads(args.json.read_text()).get("results", [])
                        if row.get("program") not in results]
            except (ValueError, AttributeError):
                kept = []
            rows = kept + rows
        args.json.write_text(json.dumps({"python": platform.python_version(), "backend": "cuda",
                                         "device": first.get("device"), "torch": first.get("torch"),
                                         "steps": steps, "results": rows}, indent=1))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", default="train,generate")
    parser.add_argument("--allocators", default=",".join(ALLOCATORS))
    parser.add_argument("--fit-allocators", default="pytorch,expandable,gpumem")
    parser.add_argument("--budget", default="train:16GiB,generate:4GiB",
                        help="device memory for the largest-batch search, per program (PROGRAM:SIZE,...)")
    parser.add_argument("--steps", type=int, default=40, help="steps (train) or requests (generate) per run")
    parser.add_argument("--quick", action="store_true", help="fewer steps (for a time-limited machine)")
    parser.add_argument("--warm-every-shape", action="store_true",
                        help="each timed run first runs one short step of each shape of its schedule, untimed")
    parser.add_argument("--rounds", type=int, default=3,
                        help="timed runs per allocator, the allocators taking turns (default 3)")
    parser.add_argument("--json", type=Path,
                        help="results, written after every run; rows of programs not run now are kept from the file")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    programs = [p for p in args.programs.split(",") if p]
    labels = [a for a in args.allocators.split(",") if a]
    fit_labels = [a for a in args.fit_allocators.split(",") if a]
    for label in labels + fit_labels:
        if label not in ALLOCATORS:
            parser.error(f"unknown allocator {label!r}; choose from {', '.join(ALLOCATORS)}")
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, not {args.rounds}")
    steps = {"train": 20 if args.quick else args.steps, "generate": 6 if args.quick else max(8, args.steps // 3)}
    budgets = parse_budgets(args.budget)

    results: Dict[str, Dict[str, dict]] = {}
    fits: Dict[str, Dict[str, int]] = {}
    for program in programs:
        results[program] = {}
        runs: Dict[str, List[dict]] = {label: [] for label in labels}
        timed = ["--steps", str(steps[program]), "--warmup", str(WARMUP[program])]
        timed += ["--warm-every-shape"] if args.warm_every_shape else []
        for round_ in range(args.rounds):
            for label in labels:
                run = run_program(program, label, timed)
                if run is None:
                    raise SystemExit(f"torch_memory_bench: {program} ran out of memory with {label} without a budget")
                runs[label].append(run)
                results[program][label] = combine_runs(runs[label])
                if "pytorch" in runs:
                    ratios = paired_ratios(runs[label], runs["pytorch"])
                    results[program][label]["paired_ratio_runs"] = ratios
                    results[program][label]["paired_ratio"] = median(ratios) if ratios else None
                write(args, results, fits, budgets, steps)  # after every run: a run cut short keeps what it measured
                print(f"{program:9s} {label:14s} round {round_ + 1}: {run['median_ms']:8.2f} ms  "
                      f"peak {run['peak_bytes'] / GiB:6.2f} GiB  (allocator's own: {run['allocator_peak_bytes']}, "
                      f"tensors: {run.get('tensor_peak_bytes')})", flush=True)
        fits[program] = {}
        for label in fit_labels:
            probe = ["--steps", "2", "--warmup", "0", "--ballast-to", str(budgets[program])]
            fits[program][label] = largest_fitting(
                lambda batch: run_program(program, label, probe + ["--batch", str(batch)]) is not None,
                start=FIT_START[program])
            write(args, results, fits, budgets, steps)
            print(f"{program:9s} {label:14s} largest batch in {budgets[program] / GiB:g} GiB: {fits[program][label]}",
                  flush=True)

    write(args, results, fits, budgets, steps)
    print(markdown(results, fits, budgets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
