"""Two PyTorch programs for the allocator comparison of torch_memory_bench.py, run one per process.

    python3 torch_programs.py PROGRAM ALLOCATOR [--steps N] [--batch B] [--ballast-to BYTES] [--seed S]

PROGRAM
    train     a GPT-style decoder (12 layers, 1024 wide, 16 heads, 32 Ki vocabulary) trained with AdamW under
              bf16 autocast; batch and sequence length change every step (seeded schedule), as they do with
              packed or bucketed data
    generate  a 16-layer decoder (1024 wide) serving requests: each request has its own batch and prompt length,
              runs the prompt, then generates tokens one by one with a KV cache that grows by one position per
              token (torch.cat, as simple generation loops do); no weights are trained
ALLOCATOR
    pytorch     PyTorch's caching allocator (PYTORCH_CUDA_ALLOC_CONF as the caller set it, e.g. expandable)
    gpumem      gpumem.torch.install() with no configuration: gpumem's default for PyTorch
    gpumem:CONF gpumem.torch.install(CONF), CONF in GPUMEM_TORCH_ALLOC_CONF's grammar (e.g. "resource:async")

Prints one JSON object on stdout: the median and mean step time and every step's time (ms, after the warm-up
steps, in the schedule's order: the same for every allocator at one seed), for gpumem's VMM pool its slabs
created, moved and released after each measured step (growth's driver calls), the peak device
memory the process used (bytes; sampled from the driver's cuMemGetInfo every 2 ms by a thread, minus the
memory in use before the first tensor), the allocator's own peak where it reports one, and the steps run.
`--warm-every-shape` first runs one short step of each shape of the schedule, left out of the times, so that no
measured step selects kernels for a new shape. `--batch` fixes the batch of every step (train) or request (generate) at the schedule's largest sequence, for the
largest-batch search; `--ballast-to BYTES` first takes device memory with cudaMalloc until BYTES remain free, so
that every allocator runs under the same budget. An out-of-memory error exits with status 3.
Weights are random (no downloads); the programs need only torch. The model is the GPT-style decoder of
benchmarks/traces/pytorch_programs.py (the programs that recorded data/logs).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import random
import statistics
import sys
import threading
import time

import torch
import torch.nn.functional as F

OOM_EXIT = 3


# ---- the device memory the process uses, from the driver -----------------------------------------------------


class _Driver:
    """cuMemGetInfo through libcuda on any thread (the primary context of the device made current there)."""

    def __init__(self, device: int):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self._check(self.lib.cuInit(0), "cuInit")
        self.context = ctypes.c_void_p()
        handle = ctypes.c_int()
        self._check(self.lib.cuDeviceGet(ctypes.byref(handle), device), "cuDeviceGet")
        self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), handle), "cuDevicePrimaryCtxRetain")
        self.bind_thread()  # the constructing thread's calls, too (the runtime may not have made it current yet)

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what} failed with CUresult {status}")

    def bind_thread(self) -> None:
        self._check(self.lib.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def used(self) -> int:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._check(self.lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo_v2")
        return total.value - free.value

    def take(self, size: int):
        """cuMemAlloc of `size` bytes (nothing for size <= 0), held until the process exits."""
        if size <= 0:
            return None
        self.bind_thread()
        pointer = ctypes.c_uint64()
        if self.lib.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size)) != 0:
            raise SystemExit(f"torch_programs: could not take {size} bytes of ballast")
        return pointer.value

    def free(self) -> int:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._check(self.lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo_v2")
        return free.value


class PeakSampler:
    """The largest device memory in use while running, sampled every `period` seconds by a thread.

    ctypes releases the GIL around each driver call, so the sampler costs the program one brief GIL hand-over
    per sample.
    """

    def __init__(self, driver: _Driver, period: float = 0.002):
        self.driver, self.period = driver, period
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.driver.bind_thread()
        while not self._stop.is_set():
            self.peak = max(self.peak, self.driver.used())
            self.samples += 1
            time.sleep(self.period)

    def __enter__(self):
        self.peak = self.driver.used()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.driver.used())


# ---- allocators -----------------------------------------------------------------------------------------------


def install_allocator(name: str) -> str:
    """Makes `name` PyTorch's allocator (before the first CUDA tensor); returns a description."""
    if name == "pytorch":
        return "pytorch " + os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "(default)")
    if name == "gpumem" or name.startswith("gpumem:"):
        import gpumem.torch

        conf = name.partition(":")[2] or None
        gpumem.torch.install(conf)
        return "gpumem " + (conf or "(default)")
    raise SystemExit(f"torch_programs: unknown allocator {name!r} (pytorch, gpumem, gpumem:CONF)")


def allocator_peak(name: str, counter: str):
    """The allocator's own peak `counter`, where it reports one: "allocated" (max_memory_allocated, the most bytes of
    live tensors at once, what any allocator must hold) or "reserved" (max_memory_reserved)."""
    try:
        if name == "pytorch":
            return getattr(torch.cuda, f"max_memory_{counter}")()
        import gpumem.torch

        return getattr(gpumem.torch, f"max_memory_{counter}")()
    except Exception:  # not every gpumem resource counts them
        return None


def pool_counters(name: str):
    """gpumem's VMM pool's slabs created, moved and released so far (the driver calls of growth), or None for
    another allocator."""
    if not name.startswith("gpumem"):
        return None
    import gpumem.torch

    stats = gpumem.torch.memory_stats()
    if stats.get("gpumem.resource") != "vmm":
        return None
    return [stats["num_device_alloc"], stats["gpumem.slabs_moved"], stats["num_device_free"]]


# ---- the model ------------------------------------------------------------------------------------------------


def _traces_programs():
    """benchmarks/traces/pytorch_programs.py, whose GPT-style decoder both programs use."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "traces", "pytorch_programs.py")
    spec = importlib.util.spec_from_file_location("pytorch_programs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpt = _traces_programs().gpt


# ---- the programs ---------------------------------------------------------------------------------------------

VOCAB = 32768


def train_schedule(steps: int, seed: int, batch: int | None):
    """(batch, sequence) per step: batch 4-16 and sequence 256-1024, or the fixed batch at sequence 1024."""
    rng = random.Random(seed)
    if batch is not None:
        return [(batch, 1024)] * steps
    return [(rng.choice([4, 6, 8, 12, 16]), rng.choice([256, 384, 512, 768, 1024])) for _ in range(steps)]


def run_train(schedule, seed: int, after_step=lambda: None):
    torch.manual_seed(seed)
    model = gpt(torch, VOCAB, d=1024, layers=12, heads=16, max_seq=1024).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    times = []
    for b, t in schedule:
        tokens = torch.randint(0, VOCAB, (b, t + 1), device="cuda")
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().view(-1, VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        after_step()
        if not math.isfinite(loss.item()):
            raise SystemExit("torch_programs: the loss is not finite")
    return times


def generate_schedule(requests: int, seed: int, batch: int | None):
    """(batch, prompt, new tokens) per request: batch 1-16, prompt 64-512, 64 new tokens; or the fixed batch at
    prompt 512 with 16 new tokens."""
    rng = random.Random(seed)
    if batch is not None:
        return [(batch, 512, 16)] * requests
    return [(rng.choice([1, 2, 4, 8, 16]), rng.choice([64, 128, 256, 512]), 64) for _ in range(requests)]


@torch.inference_mode()
def run_generate(schedule, seed: int, after_step=lambda: None):
    torch.manual_seed(seed)
    model = gpt(torch, VOCAB, d=1024, layers=16, heads=16, max_seq=1024).cuda().to(torch.bfloat16)
    times = []
    for b, prompt, new in schedule:
        tokens = torch.randint(0, VOCAB, (b, prompt), device="cuda")
        caches = [{} for _ in model.blocks]
        torch.cuda.synchronize()
        start = time.perf_counter()
        logits = model(tokens, caches, 0)
        for position in range(prompt, prompt + new):
            next_token = logits[:, -1:].argmax(dim=-1)
            logits = model(next_token, caches, position)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / new)  # per generated token
        after_step()
        del caches, logits
    return times


PROGRAMS = {"train": (run_train, train_schedule), "generate": (run_generate, generate_schedule)}


def warm_every_shape(schedule):
    """One short step for each distinct shape of `schedule`, in the order they first appear: run first, so that
    the kernel selection of every shape happens before the measured steps (a generation request of each batch and
    prompt length generates 2 tokens)."""
    shapes = list(dict.fromkeys(step[:2] for step in schedule))
    if schedule and len(schedule[0]) == 3:  # generation: (batch, prompt, new tokens)
        return [shape + (2,) for shape in shapes]
    return shapes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("program", choices=sorted(PROGRAMS))
    parser.add_argument("allocator")
    parser.add_argument("--steps", type=int, default=30, help="steps (train) or requests (generate)")
    parser.add_argument("--warmup", type=int, default=5, help="first steps left out of the times")
    parser.add_argument("--warm-every-shape", action="store_true",
                        help="before the schedule, one step of each of its shapes, left out of the times")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--ballast-to", type=int, default=None, help="leave only this many bytes free first")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    described = install_allocator(args.allocator)
    torch.cuda.init()
    device = torch.cuda.current_device()
    driver = _Driver(device)
    ballast = None
    if args.ballast_to is not None:
        ballast = driver.take(driver.free() - args.ballast_to)  # outside every allocator: the same budget for all
    baseline = driver.used()
    try:
        with PeakSampler(driver) as sampler:
            run, make_schedule = PROGRAMS[args.program]
            schedule = make_schedule(args.steps, args.seed, args.batch)
            warm = warm_every_shape(schedule) if args.warm_every_shape else []
            counters = []
            times = run(warm + schedule, args.seed, lambda: counters.append(pool_counters(args.allocator)))
            times, counters = times[len(warm):], counters[len(warm):]
    except torch.OutOfMemoryError as error:
        print(json.dumps({"oom": True, "message": str(error).splitlines()[0][:300]}))
        return OOM_EXIT
    measured = times[args.warmup:] or times
    print(json.dumps({
        "program": args.program,
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "allocator": described,
        "steps": len(times),
        "median_ms": statistics.median(measured) * 1e3,
        "mean_ms": statistics.fmean(measured) * 1e3,
        "step_ms": [round(t * 1e3, 4) for t in measured],
        "pool_counters": counters[args.warmup:] if counters and counters[0] is not None else None,
        "peak_bytes": sampler.peak - baseline,
        "allocator_peak_bytes": allocator_peak(args.allocator, "reserved"),
        "tensor_peak_bytes": allocator_peak(args.allocator, "allocated"),
        "samples": sampler.samples,
        "batch": args.batch,
        "ballast_to": args.ballast_to,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
