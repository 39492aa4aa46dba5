"""The allocation history with PyTorch on a GPU (a subprocess: PyTorch's allocator is swapped once per
process, before the first CUDA tensor): a tiny training run recorded through gpumem.torch, its snapshot read by
PyTorch's own memory tools, and `python -m gpumem report` on the dumped pickle drawing the timeline."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gpumem

TRAINING = """
    import json, sys
    import torch
    import torch.cuda._memory_viz as memory_viz
    import gpumem.torch
    from gpumem.torch import _history as history

    gpumem.torch.install()
    history.record_memory_history(max_entries=100_000)

    def make_batch():
        return torch.randn(64, 256, device="cuda"), torch.randint(0, 10, (64,), device="cuda")

    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        inputs, targets = make_batch()
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()

    snapshot = history.snapshot()
    trace = snapshot["device_traces"][torch.cuda.current_device()]
    allocs = [e for e in trace if e["action"] == "alloc"]
    assert allocs, trace[:5]
    assert any(e["action"] == "free_completed" for e in trace)
    assert snapshot["segments"], "the model's parameters are live"
    # PyTorch's own tools take it without an exception.
    assert "snapshot.pickle" in memory_viz.trace_plot(snapshot)
    assert "snapshot.pickle" in memory_viz.segment_plot(snapshot)
    memory_viz.segsum(snapshot)
    memory_viz.trace(snapshot)
    history.dump_snapshot(sys.argv[1])
    history.record_memory_history(None)
    names = {f["name"] for e in allocs for f in e["frames"]}
    print(json.dumps({"allocs": len(allocs), "with_frames": sum(1 for e in allocs if e["frames"]),
                      "make_batch_seen": "make_batch" in names}))
"""


def run(arguments, timeout=600):
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(Path(gpumem.__file__).resolve().parents[1])] + [p for p in [environment.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, *arguments], env=environment, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def torch_on_gpu():
    torch = pytest.importorskip("torch")
    if gpumem.cuda.get_backend() != "cuda" or not torch.cuda.is_available():
        pytest.skip("PyTorch on gpumem needs a GPU")
    return torch


def test_a_recorded_training_run_loads_in_pytorchs_tools_and_in_the_report(torch_on_gpu, tmp_path):
    pickle_path = tmp_path / "train.pickle"
    done = run(["-c", textwrap.dedent(TRAINING), str(pickle_path)])
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["allocs"] > 3
    # Frames come only from allocations made while the thread holds the GIL; PyTorch's operators release it,
    # so how many have frames is reported, not required.
    print(f"allocations {result['allocs']}, with Python frames {result['with_frames']}, "
          f"make_batch among them: {result['make_batch_seen']}")

    import gpumem._cli

    if not os.access(gpumem._cli.EXECUTABLE, os.X_OK):
        pytest.skip("the package has no command-line tool")
    page = tmp_path / "train.html"
    report = run(["-m", "gpumem", "report", str(pickle_path), "-r", "cuda", "-o", str(page)])
    assert report.returncode == 0, report.stdout + report.stderr
    html = page.read_text()
    assert '<h2 id="allocation-timeline">Allocation timeline</h2>' in html
    assert "<path data-block=" in html and 'id="timeline-sites"' in html
