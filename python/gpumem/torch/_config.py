"""gpumem.torch's configuration: GPUMEM_TORCH_ALLOC_CONF, in PYTORCH_CUDA_ALLOC_CONF's grammar.

A configuration is ``key:value`` pairs separated by commas (spaces around them are ignored), for example
``resource:vmm,slab_size:32MiB,release_threshold:1GiB``; sizes are ints or strings such as ``"32MiB"`` (as
gpumem's resources take them). The keys (KEYS lists them with their choices):

=================  ==========================================  ===============================================
key                values                                      meaning
=================  ==========================================  ===============================================
resource           vmm (default), pool, async, cuda, managed,  what each device gets on its first PyTorch
                   current                                     allocation (current: keep gpumem's resource)
slab_size          size (default 2MiB)                         vmm: physical memory per slab
release_threshold  size or none (default none)                 vmm: free slabs kept before giving them back
mapping_divisor    int >= 0 (default 0)                        vmm: a growth maps up to 1/N of the pool
                                                               (0: pieces of max_mapping_size, one slab)
max_mapping_size   size or none (default none)                 vmm: the largest piece one growth maps
initial_pool_size  size (default 0)                            pool: bytes taken at once
maximum_pool_size  size or none (default none)                 pool: the most the pool may hold
memory_limit       size                                        the most the device's resource may hold
memory_fraction    number in (0, 1]                            memory_limit as a fraction of the device's total
log                path                                        a LoggingResourceAdaptor on top, writing
                                                               ``path`` as ``name.dev<N>.ext`` per device
record_stream      order (default), error                      Tensor.record_stream: order the free after the
                                                               stream's work, or refuse
cudagraph_trees    off (default), keep                         torch.compile's CUDA graph trees: turn them off
                                                               (legacy graphs, which gpumem supports) or keep
=================  ==========================================  ===============================================
"""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional, Union

from .. import _gpumem

ENVIRONMENT_VARIABLE = "GPUMEM_TORCH_ALLOC_CONF"

RESOURCES = ("vmm", "pool", "async", "cuda", "managed", "current")
_VMM_KEYS = ("slab_size", "release_threshold", "mapping_divisor", "max_mapping_size")
_POOL_KEYS = ("initial_pool_size", "maximum_pool_size")

DEFAULTS: Dict[str, Any] = {
    "resource": "vmm",
    "slab_size": 2 << 20,  # PyTorch's defaults: pieces of 2 MiB (docs/python.md, "Why these defaults")
    "release_threshold": None,
    "mapping_divisor": 0,
    "max_mapping_size": None,
    "initial_pool_size": 0,
    "maximum_pool_size": None,
    "memory_limit": None,
    "memory_fraction": None,
    "log": None,
    "record_stream": "order",
    "cudagraph_trees": "off",
}
"""Every key with its default: the dict parse() returns has exactly these keys."""

KEYS: Dict[str, str] = {
    "resource": "one of " + ", ".join(RESOURCES),
    "slab_size": "a size such as 32MiB",
    "release_threshold": "a size such as 1GiB, or none",
    "mapping_divisor": "an int >= 0",
    "max_mapping_size": "a size such as 512MiB, or none",
    "initial_pool_size": "a size such as 1GiB",
    "maximum_pool_size": "a size such as 8GiB, or none",
    "memory_limit": "a size such as 8GiB",
    "memory_fraction": "a number in (0, 1]",
    "log": "a file path",
    "record_stream": "one of order, error",
    "cudagraph_trees": "one of off, keep",
}
"""Every key with the values it takes (what an error message lists)."""


def _bad(key: str, value: Any, why: str = "") -> ValueError:
    detail = f" ({why})" if why else ""
    return ValueError(f"{ENVIRONMENT_VARIABLE}: {key}:{value} is not valid{detail}; {key} takes {KEYS[key]}")


def _size(key: str, value: Any, allow_none: bool) -> Optional[int]:
    if allow_none and (value is None or (isinstance(value, str) and value.strip().lower() == "none")):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _bad(key, value)
    try:
        return _gpumem._parse_bytes(value.strip() if isinstance(value, str) else value, key)
    except (ValueError, TypeError) as error:
        raise _bad(key, value, str(error)) from None


def _choice(key: str, value: Any, choices) -> str:
    text = value.strip().lower() if isinstance(value, str) else value
    if text not in choices:
        raise _bad(key, value)
    return text


def _value(key: str, value: Any) -> Any:
    """`value` of `key` checked and converted (a string from the grammar, or a Python value from a dict)."""
    if key == "resource":
        return _choice(key, value, RESOURCES)
    if key == "record_stream":
        return _choice(key, value, ("order", "error"))
    if key == "cudagraph_trees":
        return _choice(key, value, ("off", "keep"))
    if key in ("slab_size", "initial_pool_size", "memory_limit"):
        size = _size(key, value, allow_none=False)
        if key == "slab_size" and size == 0:
            raise _bad(key, value, "a slab cannot be empty")
        return size
    if key in ("release_threshold", "max_mapping_size", "maximum_pool_size"):
        return _size(key, value, allow_none=True)
    if key == "mapping_divisor":
        if isinstance(value, bool):
            raise _bad(key, value)
        try:
            number = int(value.strip()) if isinstance(value, str) else value
        except ValueError:
            raise _bad(key, value) from None
        if not isinstance(number, int) or number < 0:
            raise _bad(key, value)
        return number
    if key == "memory_fraction":
        if isinstance(value, bool):
            raise _bad(key, value)
        try:
            number = float(value.strip()) if isinstance(value, str) else float(value)
        except (TypeError, ValueError):
            raise _bad(key, value) from None
        if not 0.0 < number <= 1.0:  # also refuses NaN
            raise _bad(key, value)
        return number
    if key == "log":
        if not isinstance(value, (str, os.PathLike)) or not os.fspath(value).strip():
            raise _bad(key, value)
        return os.fspath(value).strip()
    raise ValueError(f"{ENVIRONMENT_VARIABLE}: unknown key {key!r}; the keys are {', '.join(KEYS)}")


def _pairs(text: str) -> Dict[str, str]:
    pairs: Dict[str, str] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, colon, value = item.partition(":")
        key = key.strip()
        if not colon or not value.strip():
            raise ValueError(
                f"{ENVIRONMENT_VARIABLE}: {item!r} is not key:value (the keys are {', '.join(KEYS)})"
            )
        if key in pairs:
            raise ValueError(f"{ENVIRONMENT_VARIABLE}: key {key!r} is given twice")
        pairs[key] = value.strip()
    return pairs


def parse(conf: Union[None, str, Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The configuration `conf` as a dict of every key (DEFAULTS for those not given).

    `conf`: a string in the grammar above, a mapping of keys to values (ints, floats or strings), or None for
    the environment variable GPUMEM_TORCH_ALLOC_CONF (unset or empty: the defaults). Raises ValueError naming
    the key, the value and the valid choices for an unknown key or a bad value, and for keys that do not apply
    to the chosen resource; TypeError when `conf` is neither.
    """
    if conf is None:
        conf = os.environ.get(ENVIRONMENT_VARIABLE, "")
    if isinstance(conf, str):
        given: Mapping[str, Any] = _pairs(conf)
    elif isinstance(conf, Mapping):
        given = conf
    else:
        raise TypeError(f"a gpumem.torch configuration is a str or a dict, not {type(conf).__name__}")
    parsed = dict(DEFAULTS)
    for key, value in given.items():
        if key not in KEYS:
            raise ValueError(f"{ENVIRONMENT_VARIABLE}: unknown key {key!r}; the keys are {', '.join(KEYS)}")
        parsed[key] = _value(key, value)
    resource = parsed["resource"]
    for key in given:
        if (key in _VMM_KEYS and resource != "vmm") or (key in _POOL_KEYS and resource != "pool"):
            owner = "vmm" if key in _VMM_KEYS else "pool"
            raise ValueError(f"{ENVIRONMENT_VARIABLE}: {key} applies to resource:{owner}, not resource:{resource}")
        if resource == "current" and key in ("memory_limit", "memory_fraction", "log"):
            raise ValueError(
                f"{ENVIRONMENT_VARIABLE}: {key} applies to a resource gpumem.torch builds, not resource:current "
                "(which keeps the resource the program set)"
            )
    if "memory_limit" in given and "memory_fraction" in given:
        raise ValueError(f"{ENVIRONMENT_VARIABLE}: give memory_limit or memory_fraction, not both")
    return parsed


def apply(parsed: Mapping[str, Any]) -> None:
    """Hands a parse() result to gpumem's extension module: devices prepared from now on build it."""
    _gpumem._torch_configure(
        resource=parsed["resource"],
        slab_size=parsed["slab_size"],
        release_threshold=parsed["release_threshold"],
        mapping_divisor=parsed["mapping_divisor"],
        max_mapping_size=parsed["max_mapping_size"],
        initial_pool_size=parsed["initial_pool_size"],
        maximum_pool_size=parsed["maximum_pool_size"],
        memory_limit=parsed["memory_limit"],
        memory_fraction=parsed["memory_fraction"],
        log=parsed["log"] or "",
    )
