"""The ``gpumem`` command of an installed package: the console script ``gpumem`` and ``python -m gpumem``.

Both run the C++ command-line tool that ships inside the package (``gpumem/_bin/gpumem``, built with the
extension) in place of the Python process, with the same arguments: its output, errors and exit status are
the tool's own. ``gpumem demo`` replays the allocation log bundled in ``gpumem/_data/logs`` unless
``--log`` names another: the tool itself looks only in the source tree and where ``cmake --install`` puts
its data, and a pip install is neither.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, NoReturn, Optional, Sequence

_PACKAGE_DIR = Path(__file__).resolve().parent
EXECUTABLE = _PACKAGE_DIR / "_bin" / "gpumem"
"""The command-line tool inside the package."""
DEMO_LOG = _PACKAGE_DIR / "_data" / "logs" / "thrust_pipeline.csv.gz"
"""The allocation log ``gpumem demo`` replays by default (the tool's bundled log, data/logs/ in the source tree)."""


def command_line(arguments: Sequence[str]) -> List[str]:
    """The tool's argv for the user's `arguments` (the tool's name first): the bundled log added to
    ``demo`` when the user gives none and the package has it."""
    arguments = list(arguments)
    if arguments[:1] == ["demo"] and DEMO_LOG.is_file() and not any(
            argument == "--log" or argument.startswith("--log=") for argument in arguments[1:]):
        arguments += ["--log", str(DEMO_LOG)]
    return ["gpumem", *arguments]


def main(arguments: Optional[Sequence[str]] = None) -> NoReturn:
    """Replaces this process by the tool, run with `arguments` (default: this process's, less its name).

    Exits with status 1 and a message on standard error when the package has no tool (a build with
    GPUMEM_BUILD_CLI=OFF).
    """
    if not os.access(EXECUTABLE, os.X_OK):
        sys.stderr.write(f"gpumem: this installation of the Python package has no command-line tool ({EXECUTABLE} "
                         "is missing): it was built without GPUMEM_BUILD_CLI; reinstall it with pip install ./python\n")
        raise SystemExit(1)
    argv = command_line(sys.argv[1:] if arguments is None else arguments)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(EXECUTABLE, argv)
