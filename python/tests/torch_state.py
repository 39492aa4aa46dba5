"""A fixture for gpumem.torch's host tests: each test starts and ends with gpumem.torch's state as in a new process
(no configuration, no device prepared, statistics and spill managers cleared) and device 0 with its default
resource."""

import gc

import pytest

from gpumem import mr
from gpumem.torch import _install


@pytest.fixture(autouse=True)
def fresh_torch_state():
    _install._reset()
    mr.set_per_device_resource(0, None)
    yield
    gc.collect()
    _install._reset()
    mr.set_per_device_resource(0, None)
