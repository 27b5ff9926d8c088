"""``python -m splitwise_plan``: the same CLI as the ``splitwise-plan`` command."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
