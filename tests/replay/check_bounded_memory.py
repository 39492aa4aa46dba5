#!/usr/bin/env python3
"""`gpumem replay` streams its log: its peak memory does not grow with the log's length.

Replays two generated logs, of SMALL and LARGE events (default 0.5 M and 2 M), each gzip-compressed on the fly
into the replay's standard input (`gpumem replay -`, two resources, so the pipe is also copied for the second
pass), and compares the two processes' peak resident set sizes. The logs keep at most 1000 blocks live. A
replay that kept every row in memory (tens of bytes a row) would need over 100 MiB more for the large log; a
streaming one needs the same. The bound on the difference is generous (64 MiB), and nothing is timed.

The peak is the kernel's VmHWM of the gpumem process (/proc/PID/status), read every 10 ms while it runs:
not the rusage of the child, whose ru_maxrss also counts this Python process, which the child is a copy of
until it executes gpumem.

usage: check_bounded_memory.py GPUMEM [SMALL LARGE]
"""
import os
import subprocess
import sys
import threading
import time
import zlib

LIVE = 1000
BOUND_KIB = 64 * 1024


def rows(events):
    """The log's lines: allocations, each freed LIVE allocations later, until `events` rows."""
    yield "Thread,Time,Action,Pointer,Size,Stream\n"
    written = 0
    i = 0
    while written < events:
        second = 36000 + i // 1_000_000
        yield "1,%02d:%02d:%02d.%06d,allocate,0x%x,%d,0x0\n" % (
            second // 3600 % 24, second // 60 % 60, second % 60, i % 1_000_000, 0x7F0000000000 + i * 0x1000, 256 * (1 + i % 16))
        written += 1
        if i >= LIVE and written < events:
            j = i - LIVE
            yield "1,%02d:%02d:%02d.%06d,free,0x%x,%d,0x0\n" % (
                second // 3600 % 24, second // 60 % 60, second % 60, i % 1_000_000, 0x7F0000000000 + j * 0x1000, 256 * (1 + j % 16))
            written += 1
        i += 1


def watch_peak(pid, gpumem, peak, done):
    """Keeps in peak[0] the largest VmHWM (KiB) of process `pid` once it runs `gpumem`, until `done` is set."""
    status = "/proc/%d/status" % pid
    while not done.is_set():
        try:
            if os.path.realpath("/proc/%d/exe" % pid) == os.path.realpath(gpumem):
                with open(status) as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            peak[0] = max(peak[0], int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.01)


def peak_rss_kib(gpumem, events):
    """Replays a generated log of `events` rows from standard input; returns the process's peak RSS (KiB)."""
    env = dict(os.environ, GPUMEM_BACKEND="host")
    # ASan (asan preset) holds freed memory in a quarantine of up to 256 MiB, which fills with the log's
    # length: keep it small. Other builds ignore the variable.
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=4"
    child = subprocess.Popen([gpumem, "replay", "-", "--simulate", "--resource", "pool,binning"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    peak = [0]
    done = threading.Event()
    watcher = threading.Thread(target=watch_peak, args=(child.pid, gpumem, peak, done))
    watcher.start()
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)  # gzip framing
    batch = []
    for line in rows(events):
        batch.append(line)
        if len(batch) == 65536:
            child.stdin.write(compressor.compress("".join(batch).encode()))
            batch = []
    child.stdin.write(compressor.compress("".join(batch).encode()) + compressor.flush())
    child.stdin.close()
    output = child.stdout.read().decode(errors="replace")
    child.wait()
    done.set()
    watcher.join()
    print(output, end="")
    if child.returncode != 0:
        sys.exit("gpumem replay of %d events failed with status %d" % (events, child.returncode))
    if "(%d events" % events not in output:
        sys.exit("gpumem replay did not report %d events" % events)
    if peak[0] == 0:
        sys.exit("no VmHWM read from /proc for the gpumem process")
    return peak[0]


def main():
    gpumem = sys.argv[1]
    small = int(sys.argv[2]) if len(sys.argv) > 2 else 500_000
    large = int(sys.argv[3]) if len(sys.argv) > 3 else 2_000_000
    small_kib = peak_rss_kib(gpumem, small)
    large_kib = peak_rss_kib(gpumem, large)
    growth = large_kib - small_kib
    print("peak RSS: %d KiB for %d events, %d KiB for %d events: %+d KiB (bound %d KiB)"
          % (small_kib, small, large_kib, large, growth, BOUND_KIB))
    if growth > BOUND_KIB:
        sys.exit("the replay's memory grows with the log's length")
    print("bounded memory: ok")


if __name__ == "__main__":
    main()
