"""Device arguments as gpumem.torch's functions take them, without importing PyTorch."""

from __future__ import annotations

from .. import _gpumem


def device_index(device=None) -> int:
    """The CUDA device ordinal of `device`: an int, "cuda" or "cuda:N", a torch.device of type cuda, or None (the
    current device). Raises ValueError for another device type or a negative ordinal, TypeError for other
    objects."""
    if device is None:
        return _gpumem.cuda.get_device_id()
    if isinstance(device, bool):
        raise TypeError("a device is an int, 'cuda:N', a torch.device or None, not a bool")
    if isinstance(device, int):
        index = device
    elif isinstance(device, str):
        kind, _, number = device.strip().partition(":")
        if kind != "cuda":
            raise ValueError(f"gpumem.torch: {device!r} is not a CUDA device ('cuda' or 'cuda:N')")
        if not number:
            return _gpumem.cuda.get_device_id()
        try:
            index = int(number)
        except ValueError:
            raise ValueError(f"gpumem.torch: {device!r} is not a CUDA device ('cuda' or 'cuda:N')") from None
    elif hasattr(device, "type") and hasattr(device, "index"):  # torch.device, without importing torch
        if device.type != "cuda":
            raise ValueError(f"gpumem.torch: {device} is not a CUDA device")
        if device.index is None:
            return _gpumem.cuda.get_device_id()
        index = device.index
    else:
        raise TypeError(f"a device is an int, 'cuda:N', a torch.device or None, not {type(device).__name__}")
    if index < 0:
        raise ValueError(f"gpumem.torch: device {index} is not a device ordinal")
    return index
