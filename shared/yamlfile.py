"""YAML files that explain their mistakes: line numbers on every mapping, and a field parser.

Shared by the budgets file (``budgets.py``) and the alert rules file (``rules.py``), which the
server watches with ``WatchedFile``. Loading
rejects duplicate keys and anything but plain YAML (a ``SafeLoader``); every error names the
file, the line, the field and what was expected, e.g.::

    rules.yaml:12: rules[0].window: expected a duration in whole minutes ('5m', '1h'), got '90s'
"""

from __future__ import annotations

import re
import reprlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml

from agentlat.errors import ConfigError

T = TypeVar("T")
NOTHING = object()  # "no value to show" in an error message (None is a value)
_LATENCY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)\s*$")
LATENCY_EXPECTED = "a duration > 0: milliseconds (800), or a string with a unit ('800ms', '1.5s')"
SHARE_EXPECTED = "a share from 0 to 1, or a percentage (0.6, 60%)"


class Marked(dict):
    """A YAML mapping that remembers the line of itself and of each key."""

    line: int
    lines: dict[Any, int]


class _MarkedLoader(yaml.SafeLoader):
    """SafeLoader whose mappings carry line numbers and which rejects duplicate keys."""


def _construct_mapping(loader: _MarkedLoader, node: yaml.MappingNode) -> Marked:
    loader.flatten_mapping(node)
    out = Marked()
    out.line, out.lines = node.start_mark.line + 1, {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if not isinstance(key, str | int | float | bool):
            raise yaml.constructor.ConstructorError(None, None, "a key must be a plain value", key_node.start_mark)
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first on line {out.lines[key]})", key_node.start_mark
            )
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = line
    return out


_MarkedLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_file(path: Path, error: type[ConfigError], what: str, when_missing: str) -> str:
    """A config file's text, or ``error`` saying what is wrong and (when missing) what to do."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: no such {what}; {when_missing}") from None
    except OSError as exc:
        raise error(f"{path}: cannot read the {what} ({exc.strerror})") from None


def load_yaml(text: str, path: str, error: type[ConfigError]) -> Any:
    """Parse YAML whose mappings are ``Marked``; syntax errors become ``error`` with a line."""
    try:
        return yaml.load(text, Loader=_MarkedLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise error(f"{path}:{line}: not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:  # e.g. characters YAML does not allow
        raise error(f"{path}: not valid YAML: {exc}") from None
    except (ValueError, RecursionError) as exc:  # a 5000-digit int, month 13 of a timestamp, nesting too deep
        raise error(f"{path}: not valid YAML: {exc}") from None


def latency_ms(raw: Any) -> float | None:
    """A latency in ms from a number of ms or a string with ``ms``/``s``; None if it is neither or ≤ 0."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        ms = float(raw)
    elif isinstance(raw, str) and (match := _LATENCY.match(raw)):
        ms = float(match.group(1)) * (1000.0 if match.group(2) == "s" else 1.0)
    else:
        return None
    return ms if ms > 0 else None


def share(raw: Any) -> float | None:
    """A share in [0, 1] from a number (``0.6``) or a percentage string (``'60%'``); None if it is neither."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        value = float(raw)
    elif isinstance(raw, str) and raw.strip().endswith("%"):
        try:
            value = float(raw.strip()[:-1]) / 100
        except ValueError:
            return None
    else:
        return None
    return value if 0 <= value <= 1 else None


class _Shown(reprlib.Repr):
    """A value for a message, bounded: it may come from a request, and YAML aliases make it exponentially large."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxstring, self.maxother = 3, 200, 200

    def repr_Marked(self, x: Marked, level: int) -> str:  # reprlib dispatches on the type name
        return self.repr_dict(x, level)


_shown = _Shown().repr


class FieldParser:
    """Helpers for turning loaded YAML into a model, raising at the first problem found."""

    def __init__(self, path: str, error: type[ConfigError]) -> None:
        self.path = path
        self.error = error

    def fail(self, line: int, where: str, expected: str, got: Any = NOTHING) -> ConfigError:
        suffix = "" if got is NOTHING else f", got {_shown(got)}"
        return self.error(f"{self.path}:{line}: {where}: expected {expected}{suffix}")

    def mapping(self, value: Any, line: int, where: str, expected: str) -> Marked:
        if not isinstance(value, Marked):
            raise self.fail(line, where, expected, value)
        return value

    def keys(self, node: Marked, allowed: Iterable[str], where: str) -> None:
        """Reject keys of ``node`` not in ``allowed``; ``where`` is the prefix of the field path."""
        allowed = tuple(allowed)
        for key in node:
            if key not in allowed:
                raise self.error(
                    f"{self.path}:{node.lines[key]}: {where}{key}: unknown field; expected one of {', '.join(allowed)}"
                )

    def count(self, node: Marked, key: str, where: str, least: int = 1, most: int = 1_000_000) -> int:
        value = node[key]
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
            raise self.fail(node.lines[key], f"{where}{key}", f"a whole number from {least} to {most:,}", value)
        return value

    def number(self, node: Marked, key: str, where: str, expected: str, valid: Callable[[float], bool]) -> float:
        value = node[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not valid(float(value)):
            raise self.fail(node.lines[key], f"{where}{key}", expected, value)
        return float(value)

    def text(self, node: Marked, key: str, where: str, pattern: re.Pattern[str] | None = None) -> str:
        value = node[key]
        if not isinstance(value, str) or not value or (pattern is not None and not pattern.match(value)):
            expected = "a non-empty string" if pattern is None else f"a name matching {pattern.pattern}"
            raise self.fail(node.lines[key], f"{where}{key}", expected, value)
        return value


class WatchedFile(Generic[T]):
    """A file parsed by ``load``, parsed again when its modification time changes. ``value`` is the
    last good parse; a change that does not parse leaves it and holds the error (``error``) until the
    next change. A file that does not parse at construction raises: there is no good value yet."""

    def __init__(self, path: Path, load: Callable[[Path], T]) -> None:
        self.path = path
        self._load = load
        self._mtime_ns = self._stat()
        self.value: T = load(path)
        self.error: ConfigError | None = None

    def _stat(self) -> int | None:
        try:
            return self.path.stat().st_mtime_ns
        except OSError:
            return None

    def changed(self) -> bool:
        """Whether the file changed since the last look; when it did, it is parsed again."""
        mtime_ns = self._stat()
        if mtime_ns == self._mtime_ns:
            return False
        self._mtime_ns = mtime_ns
        try:
            self.value, self.error = self._load(self.path), None
        except ConfigError as exc:
            self.error = exc
        return True
