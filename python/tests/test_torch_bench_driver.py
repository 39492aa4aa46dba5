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
    assert "| gpumem | 51.00 | 1 | 1.020 | - | - | 17.00 GiB | 0.850 | - | 11 |" in table
    assert "| pytorch | 50.00 | 1 | 1.000 | - | - | 20.00 GiB | 1.000 | - | 8 |" in table
    assert "largest batch in 16 GiB" in table


def test_the_table_gives_the_spread_of_the_runs_and_the_peak_of_live_tensors(bench):
    row = bench.combine_runs([{"median_ms": 52.0, "mean_ms": 53.0, "peak_bytes": 10 * GiB, "tensor_peak_bytes": 9 * GiB},
                              {"median_ms": 50.0, "mean_ms": 51.0, "peak_bytes": 11 * GiB, "tensor_peak_bytes": 9 * GiB},
                              {"median_ms": 57.0, "mean_ms": 58.0, "peak_bytes": 10 * GiB, "tensor_peak_bytes": None}])
    assert row["median_ms"] == 52.0 and row["median_ms_runs"] == [52.0, 50.0, 57.0]
    assert row["peak_bytes"] == 11 * GiB and row["tensor_peak_bytes"] == 9 * GiB
    assert row["allocator_peak_bytes"] is None
    table = bench.markdown({"train": {"gpumem": row}}, {}, {"train": 16 * GiB})
    assert "| gpumem | 52.00 | 50.00-57.00 | - | - | - | 11.00 GiB | - | 9.00 GiB | - |" in table


def test_an_even_number_of_runs_gives_the_mean_of_the_middle_two(bench):
    runs = [{"median_ms": m, "mean_ms": m, "peak_bytes": GiB} for m in (40.0, 10.0, 30.0, 20.0)]
    assert bench.combine_runs(runs)["median_ms"] == 25.0


def test_the_json_keeps_the_rows_of_programs_not_run_now(bench, tmp_path):
    import argparse
    import json

    out = tmp_path / "torch.json"
    row = {"median_ms": 5.0, "mean_ms": 5.0, "peak_bytes": GiB, "steps": 3}
    first = argparse.Namespace(markdown=None, json=out)
    bench.write(first, {"train": {"gpumem": row}}, {}, {}, {"train": 3})
    bench.write(first, {"generate": {"gpumem": row}}, {}, {}, {"generate": 3})
    programs = [r["program"] for r in json.loads(out.read_text())["results"]]
    assert programs == ["train", "generate"]
    bench.write(first, {"generate": {"pytorch": row}}, {}, {}, {"generate": 3})  # a rerun replaces its program
    rows = json.loads(out.read_text())["results"]
    assert [(r["program"], r["allocator"]) for r in rows] == [("train", "gpumem"), ("generate", "pytorch")]


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


def test_paired_ratios_divide_each_round_by_the_pytorch_run_of_the_same_round(bench):
    base = [{"step_ms": [10.0, 10.0]}, {"step_ms": [20.0, 20.0]}, {"step_ms": [10.0, 10.0]}]
    runs = [{"step_ms": [10.5, 10.5]}, {"step_ms": [19.0, 21.0]}, {"step_ms": [9.0, 9.0]}]
    assert bench.paired_ratios(runs, base) == pytest.approx([1.05, 1.0, 0.9])
    # a round without step times on both sides (or of another length) is left out
    assert bench.paired_ratios([{"step_ms": [1.0]}, {}], [{"step_ms": [1.0, 2.0]}, {"step_ms": [1.0]}]) == []
    row = {"median_ms": 20.0, "peak_bytes": GiB, "paired_ratio_runs": [1.05, 1.0, 0.9]}
    table = bench.markdown({"train": {"gpumem": row}}, {}, {})
    assert "| 1.000 (0.900-1.050, 3 rounds) |" in table


def test_best_of_rounds_sums_each_steps_fastest_run(bench):
    runs = [{"step_ms": [10.0, 30.0, 5.0]}, {"step_ms": [12.0, 20.0, 6.0]}, {"step_ms": [11.0, 25.0, 4.0]}]
    assert bench.best_of_rounds(runs) == pytest.approx(10.0 + 20.0 + 4.0)
    assert bench.best_of_rounds([{"step_ms": [1.0]}, {"step_ms": [1.0, 2.0]}]) is None  # other schedules
    assert bench.best_of_rounds([{"median_ms": 3.0}]) is None
    rows = {"pytorch": {"median_ms": 20.0, "peak_bytes": GiB, "best_ms": 40.0},
            "gpumem": {"median_ms": 21.0, "peak_bytes": GiB, "best_ms": 39.6}}
    table = bench.markdown({"train": rows}, {}, {})
    assert "| - | 0.990 | 1.00 GiB |" in table
