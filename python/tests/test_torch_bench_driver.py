"""The pure parts of benchmarks/python/torch_memory_bench.py (the PyTorch allocator comparison): the largest-batch
search, the budget grammar and the table. The programs themselves need PyTorch and a GPU (the GPU machine runs
them); importing the driver needs neither."""

import importlib.util
from pathlib import Path

import pytest

DRIVER = Path(__file__).resolve().parents[2] / "benchmarks" / "python" / "torch_memory_bench.py"
GiB = 1 << 30


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("torch_memory_bench", DRIVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("largest", [0, 1, 2, 3, 4, 5, 7, 8, 9, 63, 64, 65, 200, 511, 512])
def test_the_search_finds_the_largest_batch_that_fits(bench, largest):
    probed = []

    def fits(batch):
        probed.append(batch)
        return batch <= largest

    assert bench.largest_fitting(fits) == largest
    assert len(probed) <= 2 * 9 + 1  # doubling then bisection: logarithmic in the limit
    assert all(1 <= batch <= 512 for batch in probed)


def test_the_search_stops_at_its_limit(bench):
    assert bench.largest_fitting(lambda batch: True, limit=100) == 100


def test_budgets_parse_per_program_with_units(bench):
    assert bench.parse_budgets("train:16GiB,generate:512MiB") == {"train": 16 * GiB, "generate": 512 << 20}
    assert bench.parse_budgets("train:1.5GiB") == {"train": 3 * GiB // 2}
    with pytest.raises(SystemExit, match="bad budget 'train:lots'"):
        bench.parse_budgets("train:lots")


def test_the_table_gives_ratios_to_pytorchs_default(bench):
    results = {"train": {"pytorch": {"median_ms": 50.0, "peak_bytes": 20 * GiB},
                         "gpumem": {"median_ms": 51.0, "peak_bytes": 17 * GiB}}}
    table = bench.markdown(results, {"train": {"pytorch": 8, "gpumem": 11}}, {"train": 16 * GiB})
    assert "| gpumem | 51.00 | 1.020 | 17.00 GiB | 0.850 | 11 |" in table
    assert "| pytorch | 50.00 | 1.000 | 20.00 GiB | 1.000 | 8 |" in table
    assert "largest batch in 16 GiB" in table


@pytest.fixture
def programs(monkeypatch):
    """benchmarks/python/torch_programs.py with stand-ins for the parts of torch its import touches (the schedule
    helpers under test need none of it)."""
    import sys
    import types

    torch = types.ModuleType("torch")
    torch.nn = types.ModuleType("torch.nn")
    torch.nn.Module = object
    torch.nn.functional = types.ModuleType("torch.nn.functional")
    torch.inference_mode = lambda: (lambda function: function)
    for name, module in {"torch": torch, "torch.nn": torch.nn, "torch.nn.functional": torch.nn.functional}.items():
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("torch_programs", DRIVER.with_name("torch_programs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_warming_every_shape_runs_each_shape_of_the_schedule_once_in_order(programs):
    schedule = programs.train_schedule(40, 7, None)
    warm = programs.warm_every_shape(schedule)
    assert len(warm) == len(set(warm)) and set(warm) == set(schedule)
    assert warm[0] == schedule[0]
    requests = programs.generate_schedule(10, 7, None)
    warm = programs.warm_every_shape(requests)
    assert {w[:2] for w in warm} == {r[:2] for r in requests} and all(w[2] == 2 for w in warm)
    assert programs.warm_every_shape(programs.train_schedule(3, 7, 16)) == [(16, 1024)]
