"""gpumem's debug log with the names of RMM's debug logger (``rmm.set_logging_level`` and friends).

The debug log reports rare events (a pool growing, shrinking or failing, a misuse that deallocation
ignores), one line each, to stderr or the file ``GPUMEM_DEBUG_LOG_FILE`` names (RMM: ``RMM_DEBUG_LOG_FILE``);
``GPUMEM_LOG_LEVEL`` sets its starting level (default warn). It is not the allocation log: that is
``enable_logging`` / ``LoggingResourceAdaptor``.

Levels are ``level_enum`` members, with RMM's values: trace, debug, info, warn, error, critical, off.
gpumem writes no message more severe than error, so ``critical`` logs what ``off`` logs (nothing) while
``get_logging_level()`` still reports ``critical``. Every level is compiled in: ``should_log(level)`` is true
exactly when `level` is at least the current level (and not off).
"""

from __future__ import annotations

import enum
import threading

from . import _gpumem

__all__ = ["flush_logger", "get_flush_level", "get_logging_level", "level_enum", "set_flush_level",
           "set_logging_level", "should_log"]

_debug_log = _gpumem._debug_log


class level_enum(enum.IntEnum):  # noqa: N801  (RMM's name)
    """A debug log level, RMM's values."""

    trace = 0
    debug = 1
    info = 2
    warn = 3
    error = 4
    critical = 5
    off = 6
    n_levels = 7


_OFF = 5  # gpumem's off
_lock = threading.Lock()
_chosen = {"logging": None, "flush": None}  # critical, when chosen (gpumem's log holds it as off)


def _check(level) -> level_enum:
    if not isinstance(level, level_enum) or level is level_enum.n_levels:
        raise TypeError(f"level must be an instance of the level_enum enum (trace .. off), not {level!r}")
    return level


def _to_gpumem(level: level_enum) -> int:
    return int(level) if level <= level_enum.error else _OFF


def _from_gpumem(value: int, kind: str) -> level_enum:
    if value == _OFF and _chosen[kind] is level_enum.critical:
        return level_enum.critical
    return level_enum.off if value == _OFF else level_enum(value)


def _set(kind: str, setter, level) -> None:
    level = _check(level)
    with _lock:
        setter(_to_gpumem(level))
        _chosen[kind] = level


def _get(kind: str, getter) -> level_enum:
    with _lock:
        return _from_gpumem(getter(), kind)


def set_logging_level(level) -> None:
    """Sets the debug log's level: messages of `level` or more severe are written. Raises TypeError for
    anything but a ``level_enum``."""
    _set("logging", _debug_log.set_level, level)


def get_logging_level() -> level_enum:
    """The debug log's current level (a ``level_enum``)."""
    return _get("logging", _debug_log.get_level)


def should_log(level) -> bool:
    """Whether a message of `level` would be written now. Raises TypeError for anything but a ``level_enum``."""
    level = _check(level)
    return level != level_enum.off and level >= get_logging_level()


def set_flush_level(level) -> None:
    """Lines of `level` or more severe are flushed to the log file as they are written; others wait for
    ``flush_logger()`` or a later flush. Raises TypeError for anything but a ``level_enum``."""
    _set("flush", _debug_log.set_flush_level, level)


def get_flush_level() -> level_enum:
    """The flush level (a ``level_enum``; trace unless set: every line is flushed at once)."""
    return _get("flush", _debug_log.get_flush_level)


def flush_logger() -> None:
    """Writes every buffered line of the debug log to its file now."""
    _debug_log.flush()
