"""Checks of parameters, one convention: a value not allowed raises ``ConfigError(name, value, allowed)``.

Each returns the value it checked, so a caller validates and keeps in one line.
``name`` is what the user wrote (a notebook's parameter), so the error names
what they can change.

Examples
--------
>>> integer("repeats", 3, at_least=1)
3
>>> integer("repeats", 0, at_least=1)
Traceback (most recent call last):
...
edgelab.common.errors.ConfigError: repeats=0 is not allowed: an integer >= 1
>>> choice("split", "macs", ("jeon", "macs", "params"))
'macs'
>>> number("learning_rate", -1.0, above=0)
Traceback (most recent call last):
...
edgelab.common.errors.ConfigError: learning_rate=-1.0 is not allowed: a number > 0
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from edgelab.common.errors import ConfigError


def is_integer(value: Any) -> bool:
    """Whether ``value`` is an integer (numpy's too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def integer(
    name: str,
    value: Any,
    *,
    at_least: int = 0,
    at_most: int | None = None,
    none: str = "",
    numpy: bool = False,
    also: str = "",
) -> Any:
    """``value`` if it is an integer in ``[at_least, at_most]`` (``none``: what None means, when it is allowed).

    ``numpy``: numpy's integers are integers too, and the value comes back as a Python ``int``;
    ``also`` names what else the caller takes, checked by it (as ``choice``'s).
    """
    if value is None and none:
        return None
    if (
        not (is_integer(value) if numpy else isinstance(value, int) and not isinstance(value, bool))
        or value < at_least
        or (at_most is not None and value > at_most)
    ):
        allowed = f"an integer >= {at_least}" if at_most is None else f"an integer from {at_least} to {at_most}"
        raise ConfigError(
            name, value, allowed + (f", or None ({none})" if none else "") + (f", or {also}" if also else "")
        )
    return int(value) if numpy else value


def number(
    name: str,
    value: Any,
    *,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float | None = None,
    below: float | None = None,
    unit: str = "",
    none: str = "",
) -> Any:
    """``value`` if it is a real number ``> above``, ``>= at_least``, ``<= at_most``, ``< below`` (each if given)."""
    if value is None and none:
        return None
    bounds = [
        f"> {above:g}" if above is not None else "",
        f">= {at_least:g}" if at_least is not None else "",
        f"<= {at_most:g}" if at_most is not None else "",
        f"< {below:g}" if below is not None else "",
    ]
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value == value  # not nan
    ok = ok and (above is None or value > above) and (at_least is None or value >= at_least)
    ok = ok and (at_most is None or value <= at_most) and (below is None or value < below)
    if not ok:
        what = f"a number{' of ' + unit if unit else ''} " + " and ".join(b for b in bounds if b)
        raise ConfigError(name, value, what.strip() + (f", or None ({none})" if none else ""))
    return value


def choice(name: str, value: Any, allowed: Sequence[Any], *, also: str = "") -> Any:
    """``value`` if it is one of ``allowed`` (``also`` names what else the caller takes, checked by it)."""
    if isinstance(value, str | int | float | bool | type(None)) and value in allowed:
        return value
    options = ", ".join(repr(a) if a is None else str(a) for a in allowed)
    raise ConfigError(name, value, f"one of {options}" + (f", or {also}" if also else ""))


def choices(name: str, values: Iterable[Any], allowed: Sequence[Any], *, at_least: int = 1) -> tuple[Any, ...]:
    """``values`` as a tuple if each is one of ``allowed``, none twice, and at least ``at_least`` of them."""
    items = (values,) if isinstance(values, str) else tuple(values)
    if len(items) < at_least or len(set(items)) != len(items) or any(v not in allowed for v in items):
        raise ConfigError(name, values, f"{at_least}+ distinct names among {', '.join(map(str, allowed))}")
    return items


def flag(name: str, value: Any) -> bool:
    """``value`` if it is True or False."""
    if not isinstance(value, bool):
        raise ConfigError(name, value, "True or False")
    return value


def keywords(function: str, given: Mapping[str, Any], group: Any) -> None:
    """Raise ``TypeError``, as Python does, for a keyword in ``given`` that is not a key of ``group`` (a TypedDict).

    For a function that takes a group of keyword arguments as ``**group: Unpack[Group]``.
    """
    known = group.__required_keys__ | group.__optional_keys__
    unknown = [key for key in given if key not in known]
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
