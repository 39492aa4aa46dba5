"""``python -m gpumem ARGS``: the ``gpumem`` command-line tool, as the console script ``gpumem`` runs it."""

from ._cli import main

if __name__ == "__main__":
    main()
