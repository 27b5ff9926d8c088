"""The one error type users see: a one-line message naming the input and what is wrong.

A message names a domain object's field with :func:`input_name`: through the Python API it reads as the
field (``rps must be positive``), and the command line renders it as its option (``--rps must be
positive``, :meth:`SplitwisePlanError.render`).
"""

from __future__ import annotations

import math
import numbers
import re

_FIELD = re.compile("\ue000([A-Za-z_][A-Za-z0-9_]*)\ue000")   # a field's name between two private-use marks


def input_name(name: str) -> str:
    """A field's name as an error message names it (read as ``name``; the CLI shows its option)."""
    return f"\ue000{name}\ue000"


class SplitwisePlanError(ValueError):
    """Bad user input (file, name or number); the CLI prints it as one line and exits 2."""

    def __init__(self, message: str) -> None:
        # Keep the message on one line so the CLI can print it as ``error: <message>``.
        super().__init__(" ".join(str(message).split()))

    def __str__(self) -> str:
        return self.render(lambda name: name)

    def render(self, name_of) -> str:
        """The message with each :func:`input_name` named by ``name_of(field)`` (the CLI: its option)."""
        return _FIELD.sub(lambda m: name_of(m.group(1)), super().__str__())


class Stopped(KeyboardInterrupt):
    """A run stopped by SIGTERM or SIGHUP: handled as Ctrl-C is (work kept, exit 130), named as it came."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


def choices(names) -> str:
    """Format valid names for an error message, sorted: ``a, b, c``."""
    return ", ".join(sorted(str(n) for n in names)) or "(none)"


def by_name(pool, name):
    """``pool[name]``, else the one entry whose name differs from ``name`` only in case (KeyError: none
    or several): names are typed by hand, and BLOOM-176B means bloom-176b."""
    try:
        return pool[name]
    except KeyError:
        match = [k for k in pool if isinstance(k, str) and isinstance(name, str) and k.lower() == name.lower()]
        if len(match) != 1:
            raise
        return pool[match[0]]


def positive_number(value, what: str) -> float:
    """``value`` as a positive finite float, or a user error naming ``what``."""
    if isinstance(value, bool):
        raise SplitwisePlanError(f"{what} must be a number, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise SplitwisePlanError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(x) or x <= 0:
        raise SplitwisePlanError(f"{what} must be positive and finite, got {value!r}")
    return x


def whole_number(value, what: str, least: int, most: int | None = None, unit: str = "") -> int:
    """``value`` as an int from ``least`` to ``most`` (numpy integers too; not bools or floats), or a
    user error naming ``what``."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise SplitwisePlanError(f"{what} must be a whole number{' of' + unit if unit else ''}, got {value!r}")
    n = value.__index__()
    if most is None and n < least:
        raise SplitwisePlanError(f"{what} must be a whole number >= {least}, got {value!r}")
    if most is not None and not least <= n <= most:
        raise SplitwisePlanError(f"{what} must be between {least:,} and {most:,}{unit}, got {n}")
    return n


def real_number(value, what: str) -> float:
    """``value`` as a float (numpy numbers and numeric strings too; not bools), or a user error naming ``what``;
    the caller checks its range."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SplitwisePlanError(f"{what} must be a number, got {value!r}")
    return float(value)


def seed_value(value, what: str | None = None) -> int:
    """``value`` as a random seed numpy takes (a whole number >= 0), or a user error naming ``what``."""
    return whole_number(value, input_name("seed") if what is None else what, 0)


def plural(n: int, word: str) -> str:
    """``n`` and ``word``, plural unless n is 1: "1 request", "2,366 requests"."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"
