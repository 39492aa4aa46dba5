"""gpumem.torch's configuration (GPUMEM_TORCH_ALLOC_CONF): the grammar, every key, the errors, and what
configure() makes a device build (host backend, through the allocator hooks table)."""


import pytest

import gpumem
import gpumem.torch
from gpumem import mr
from gpumem.torch import _config
from torch_hooks_table import hooks_table
from torch_state import fresh_torch_state  # noqa: F401 (an autouse fixture)

MiB = 1 << 20
GiB = 1 << 30




def parse(text):
    return gpumem.torch.parse_configuration(text)


def test_an_empty_configuration_is_the_defaults(monkeypatch):
    monkeypatch.delenv(_config.ENVIRONMENT_VARIABLE, raising=False)
    assert parse("") == _config.DEFAULTS
    assert parse(None) == _config.DEFAULTS
    assert parse({}) == _config.DEFAULTS
    assert _config.DEFAULTS["resource"] == "vmm"
    assert _config.DEFAULTS["record_stream"] == "order" and _config.DEFAULTS["cudagraph_trees"] == "off"


def test_the_grammar_takes_key_value_pairs_with_spaces_and_a_trailing_comma():
    parsed = parse(" resource : vmm , slab_size:4MiB,release_threshold: 1GiB ,")
    assert parsed["resource"] == "vmm"
    assert parsed["slab_size"] == 4 * MiB
    assert parsed["release_threshold"] == GiB
    assert set(parsed) == set(_config.DEFAULTS)


def test_the_environment_variable_is_read_when_no_configuration_is_given(monkeypatch):
    monkeypatch.setenv("GPUMEM_TORCH_ALLOC_CONF", "resource:pool,maximum_pool_size:2GiB")
    parsed = parse(None)
    assert parsed["resource"] == "pool" and parsed["maximum_pool_size"] == 2 * GiB
    assert gpumem.torch.configure(None)["resource"] == "pool"
    assert gpumem.torch.configuration()["maximum_pool_size"] == 2 * GiB
    assert parse("resource:cuda")["resource"] == "cuda"  # an argument wins over the variable


@pytest.mark.parametrize(
    "text, key, value",
    [
        ("resource:vmm", "resource", "vmm"),
        ("resource:POOL", "resource", "pool"),
        ("resource:async", "resource", "async"),
        ("resource:cuda", "resource", "cuda"),
        ("resource:managed", "resource", "managed"),
        ("resource:current", "resource", "current"),
        ("slab_size:2MiB", "slab_size", 2 * MiB),
        ("slab_size:4194304", "slab_size", 4 * MiB),
        ("release_threshold:none", "release_threshold", None),
        ("release_threshold:0", "release_threshold", 0),
        ("release_threshold:512MiB", "release_threshold", 512 * MiB),
        ("mapping_divisor:0", "mapping_divisor", 0),
        ("mapping_divisor:16", "mapping_divisor", 16),
        ("max_mapping_size:64MiB", "max_mapping_size", 64 * MiB),
        ("max_mapping_size:None", "max_mapping_size", None),
        ("resource:pool,initial_pool_size:1GiB", "initial_pool_size", GiB),
        ("resource:pool,maximum_pool_size:none", "maximum_pool_size", None),
        ("resource:pool,maximum_pool_size:3GiB", "maximum_pool_size", 3 * GiB),
        ("memory_limit:8GiB", "memory_limit", 8 * GiB),
        ("memory_fraction:0.25", "memory_fraction", 0.25),
        ("memory_fraction:1", "memory_fraction", 1.0),
        ("log:/tmp/torch.csv", "log", "/tmp/torch.csv"),
        ("record_stream:error", "record_stream", "error"),
        ("record_stream:order", "record_stream", "order"),
        ("cudagraph_trees:keep", "cudagraph_trees", "keep"),
        ("cudagraph_trees:off", "cudagraph_trees", "off"),
    ],
)
def test_every_key_takes_its_values(text, key, value):
    assert parse(text)[key] == value


def test_a_dict_takes_python_values_and_strings():
    parsed = parse({"slab_size": 8 * MiB, "release_threshold": "none", "memory_fraction": 0.5, "mapping_divisor": 4})
    assert (parsed["slab_size"], parsed["release_threshold"]) == (8 * MiB, None)
    assert (parsed["memory_fraction"], parsed["mapping_divisor"]) == (0.5, 4)


@pytest.mark.parametrize(
    "text, named",
    [
        ("resource:rmm", ["resource", "rmm", "vmm, pool, async, cuda, managed, current"]),
        ("slab_size:lots", ["slab_size", "lots", "a size"]),
        ("slab_size:0", ["slab_size", "0"]),
        ("slab_size:-4", ["slab_size", "-4"]),
        ("release_threshold:some", ["release_threshold", "some", "or none"]),
        ("mapping_divisor:-1", ["mapping_divisor", "-1", "int >= 0"]),
        ("mapping_divisor:1.5", ["mapping_divisor", "1.5"]),
        ("memory_fraction:0", ["memory_fraction", "0", "(0, 1]"]),
        ("memory_fraction:1.5", ["memory_fraction", "1.5", "(0, 1]"]),
        ("memory_fraction:nan", ["memory_fraction", "nan"]),
        ("memory_fraction:half", ["memory_fraction", "half"]),
        ("memory_limit:none", ["memory_limit", "none"]),
        ("record_stream:ignore", ["record_stream", "ignore", "order, error"]),
        ("cudagraph_trees:on", ["cudagraph_trees", "on", "off, keep"]),
        ("expandable_segments:True", ["expandable_segments", "the keys are", "resource"]),
        ("resource", ["'resource'", "key:value"]),
        ("resource:", ["'resource:'", "key:value"]),
        ("resource:vmm,resource:pool", ["resource", "twice"]),
        ("resource:pool,slab_size:4MiB", ["slab_size", "resource:vmm", "resource:pool"]),
        ("initial_pool_size:1GiB", ["initial_pool_size", "resource:pool", "resource:vmm"]),
        ("resource:current,memory_limit:1GiB", ["memory_limit", "resource:current"]),
        ("memory_limit:1GiB,memory_fraction:0.5", ["memory_limit", "memory_fraction", "not both"]),
    ],
)
def test_a_bad_key_or_value_is_a_value_error_naming_it(text, named):
    with pytest.raises(ValueError) as error:
        parse(text)
    message = str(error.value)
    assert "GPUMEM_TORCH_ALLOC_CONF" in message
    for part in named:
        assert part in message, message


def test_a_configuration_of_another_type_is_a_type_error():
    with pytest.raises(TypeError, match="str or a dict"):
        parse(42)
    with pytest.raises(ValueError, match="slab_size"):
        parse({"slab_size": True})


def test_a_bad_configuration_changes_nothing():
    gpumem.torch.configure("slab_size:4MiB")
    with pytest.raises(ValueError):
        gpumem.torch.configure("slab_size:4MiB,resource:nothing")
    assert gpumem.torch.configuration()["slab_size"] == 4 * MiB


def test_the_extension_refuses_values_the_parser_would_refuse():
    with pytest.raises(ValueError, match="resource 'nothing'"):
        gpumem._gpumem._torch_configure(resource="nothing")
    with pytest.raises(ValueError, match="memory_fraction"):
        gpumem._gpumem._torch_configure(memory_fraction=0.0)


# ---- what a configuration builds (the device's first allocation through the hooks) ------------------------


def first_allocation(conf, size=4096):
    """Configures, allocates `size` bytes on device 0 through alloc2, and returns (resource, pointer)."""
    gpumem.torch.configure(conf)
    hooks = hooks_table()
    assert gpumem.torch.resource(0) is None
    status, pointer = hooks.alloc(size, 0)
    assert status == 0, hooks.error()
    return gpumem.torch.resource(0), pointer


def free(pointer, size=4096):
    assert hooks_table().free2(pointer, size, 0, None) == 0


def test_vmm_options_reach_the_pool():
    pool, p = first_allocation("slab_size:4MiB,mapping_divisor:0,max_mapping_size:8MiB,release_threshold:none")
    assert isinstance(pool, mr.VmmPoolMemoryResource)
    assert (pool.slab_size, pool.mapping_divisor, pool.max_mapping_size) == (4 * MiB, 0, 8 * MiB)
    assert pool.maximum_physical_size is None
    free(p)
    assert pool.physical_bytes == 4 * MiB  # no release threshold: the slab is kept


def test_a_release_threshold_of_zero_gives_free_slabs_back_at_once():
    pool, p = first_allocation("slab_size:2MiB,release_threshold:0")
    assert pool.physical_bytes == 2 * MiB
    free(p)
    assert pool.physical_bytes == 0


def test_memory_limit_caps_the_vmm_pool():
    pool, p = first_allocation("slab_size:2MiB,memory_limit:64MiB")
    assert pool.maximum_physical_size == 64 * MiB
    assert gpumem.torch.get_per_process_memory_fraction(0) == pytest.approx(64 * MiB / gpumem.mr.available_device_memory()[1])
    free(p)


def test_memory_fraction_caps_the_vmm_pool_at_that_share_of_the_device():
    total = gpumem.mr.available_device_memory()[1]
    pool, p = first_allocation("slab_size:2MiB,memory_fraction:0.25")
    assert pool.maximum_physical_size == int(total * 0.25)
    assert gpumem.torch.get_per_process_memory_fraction(0) == pytest.approx(0.25)
    free(p)


@pytest.mark.parametrize(
    "conf, expected",
    [
        ("resource:pool,initial_pool_size:8MiB", mr.PoolMemoryResource),
        ("resource:cuda", mr.CudaMemoryResource),
        ("resource:managed", mr.ManagedMemoryResource),
        ("resource:cuda,memory_limit:16MiB", mr.LimitingResourceAdaptor),
    ],
)
def test_each_resource_is_built(conf, expected):
    resource, p = first_allocation(conf)
    assert isinstance(resource, expected), resource
    if conf.startswith("resource:pool"):
        assert resource.pool_size() == 8 * MiB
    if "memory_limit" in conf:
        assert resource.get_allocation_limit() == 16 * MiB
        assert gpumem.torch.get_per_process_memory_fraction(0) == pytest.approx(
            16 * MiB / gpumem.mr.available_device_memory()[1])
    free(p)


def test_log_puts_a_logging_adaptor_on_top_writing_one_file_per_device(tmp_path):
    name = tmp_path / "torch.csv"
    resource, p = first_allocation(f"slab_size:2MiB,log:{name}", size=12345)
    free(p, 12345)
    gpumem.torch._install._reset()  # drops the adaptor: the file is complete
    logged = (tmp_path / "torch.dev0.csv").read_text()
    assert "allocate" in logged and "12345" in logged, logged


def test_resource_current_builds_nothing():
    resource, p = first_allocation("resource:current")
    assert isinstance(resource, mr.CudaMemoryResource)
    free(p)
