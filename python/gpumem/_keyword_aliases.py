"""RMM's keyword names accepted beside gpumem's, so that calls written for RMM with keywords run unchanged.

gpumem names a resource's upstream ``upstream`` and DeviceBuffer's copy arguments ``data`` / ``out``; RMM
names them ``upstream_mr``, ``b``, ``ary`` and ``cuda_ary``. Both spellings are accepted; giving both for one
parameter is a TypeError, as Python gives for a duplicated argument.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict

_MISSING = object()


def _renamed(function: Callable[..., Any], aliases: Dict[str, str], qualname: str) -> Callable[..., Any]:
    """`function` with each keyword of `aliases` (RMM's name -> gpumem's) passed on under gpumem's name."""

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        for alias, name in aliases.items():
            value = kwargs.pop(alias, _MISSING)
            if value is _MISSING:
                continue
            if name in kwargs:
                raise TypeError(f"{qualname}() got the same argument as {name!r} and as {alias!r}")
            kwargs[name] = value
        return function(*args, **kwargs)

    return call


def accept_aliases(cls: type, method: str, aliases: Dict[str, str]) -> None:
    """Makes ``cls.method`` (an instance method, ``__init__`` included, or a static method) accept the keyword
    names of `aliases` (alias -> the method's own name)."""
    qualname = f"{cls.__name__}.{method}"
    raw = cls.__dict__[method]
    if isinstance(raw, staticmethod):
        setattr(cls, method, staticmethod(_renamed(raw.__func__, aliases, qualname)))
    else:
        setattr(cls, method, _renamed(getattr(cls, method), aliases, qualname))
