"""A section's JSON form, in and out: the Section base class, and the reader that checks every key the schema
names against its field's type annotation (docs/report-schema.md, "What reading checks").

A section read from JSON keeps the keys this version does not name (a newer minor version's additions) in
`extra_keys`, and its key order, so a section loaded and saved again gives back the same JSON. Optional keys
left None are not written, except the ones marked `null_when_absent` (the schema writes those as null). A
field is written under its own name, or under the key `stored_as` gives it where the schema's key names it
less well than the code does. A section the audit builds (`Section.of`) writes the keys it was given, in their
order, as a section read with them does.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

from macs_audit.errors import InputError

MAX_DEPTH = 64  # of nested arrays and objects in a report or gate config (a report written by evaluate has about 6)

S = TypeVar("S", bound="Section")


@dataclasses.dataclass(frozen=True)
class Length:
    """A field's array has exactly this many items (`Annotated[list[float], Length(2)]`: an interval)."""

    n: int


class Keys:
    """The keys the schema names in a free-form object (`Annotated[dict[str, Any], Keys(coverage=float)]`):
    each present is checked on reading like a section's field; the object stays a plain dict, and keys
    it does not name are kept unchecked."""

    def __init__(self, **types: Any):
        self.types = types


def null_when_absent() -> Any:
    """An optional field the JSON always carries, as null when it has no value."""
    return dataclasses.field(default=None, metadata={"null": True})


def stored_as(key: str, **field: Any) -> Any:
    """A field the JSON holds under `key` rather than its name (`dataclasses.field` arguments in `field`)."""
    return dataclasses.field(metadata={"key": key}, **field)


def plain(value: Any) -> Any:
    """JSON-ready copy: sections as objects, containers copied (tuples become lists)."""
    if isinstance(value, Section):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


_FIELD_TYPES: dict[type, dict[str, Any]] = {}


def field_types(cls: type) -> dict[str, Any]:
    """The resolved type of each schema field of a Section or of Report (annotations are strings here)."""
    if cls not in _FIELD_TYPES:
        hints = typing.get_type_hints(cls, include_extras=True)
        _FIELD_TYPES[cls] = {
            f.name: hints[f.name] for f in dataclasses.fields(cls) if f.name not in ("extra_keys", "_keys")
        }
    return _FIELD_TYPES[cls]


def required(field: dataclasses.Field) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def _describe(hint: Any) -> str:
    """A type as the message names it, in JSON's words: `an object`, `an array of numbers`, `a string`."""
    if isinstance(hint, type) and (issubclass(hint, (Section, Mapping)) or dataclasses.is_dataclass(hint)):
        return "an object"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        lengths = [m.n for m in args[1:] if isinstance(m, Length)]
        inner = _describe(args[0])
        return inner.replace("an array of ", f"an array of {lengths[0]} ") if lengths else inner
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args if a is not type(None))
    if origin is list:
        if args[0] is Any:
            return "an array"
        item = _describe(args[0])
        return f"an array of {'arrays' if item.startswith('an array') else item.split(' ', 1)[1] + 's'}"
    if origin is dict:
        return "an object"
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(hint, "a value")


def _shown(value: Any) -> str:
    """The value a message says it got: null, true, 5, "text" (shortened), an array, an object."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value if len(value) <= 40 else value[:40] + "...", ensure_ascii=False)
    return "an array" if isinstance(value, (list, tuple)) else "an object" if isinstance(value, Mapping) else "?"


def expected(where: str, hint: Any, value: Any) -> InputError:
    """The error for `value` at JSON path `where`, which does not fit the type `hint`."""
    return InputError(f"{where}: expected {_describe(hint)}, got {_shown(value)}")


def read_value(value: Any, hint: Any, where: str) -> Any:
    """`value` checked against the type `hint` (and sections read): the one reader of every field.

    JSON's types stand for Python's: an integer is a number, true and false are not; an array is a list
    (a tuple from the audit too). Raises InputError naming the JSON path of the first value that does not fit."""
    if hint is Any:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        return _read_annotated(value, hint, where)
    if origin in (typing.Union, types.UnionType):
        return _read_union(value, hint, where)
    if isinstance(hint, type) and issubclass(hint, Section):
        return hint.from_dict(value, where)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise expected(where, hint, value)
        return [read_value(item, args[0], f"{where}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise expected(where, hint, value)
        return {key: read_value(item, args[1], f"{where}.{key}") for key, item in value.items()}
    if not _FITS[hint](value):
        raise expected(where, hint, value)
    return value


# What a JSON value of each plain type is: a bool is no number.
_FITS: dict[type, Callable[[Any], bool]] = {
    str: lambda v: isinstance(v, str),
    int: lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool),
    float: lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool),
    bool: lambda v: isinstance(v, bool),
}


def _read_annotated(value: Any, hint: Any, where: str) -> Any:
    """`value` read as the annotated type, then held to its Length and to the types of its Keys."""
    args = typing.get_args(hint)
    value = read_value(value, args[0], where)
    for meta in args[1:]:
        if isinstance(meta, Length) and len(value) != meta.n:
            raise InputError(f"{where}: expected {_describe(hint)}, got an array of {len(value)}")
        if isinstance(meta, Keys):
            for key, key_hint in meta.types.items():
                if key in value:
                    read_value(value[key], key_hint, f"{where}.{key}")
    return value


def _read_union(value: Any, hint: Any, where: str) -> Any:
    """`value` read as the first of the union's types it fits (None where the union allows it); where it fits
    none, the error of the one type beside None, or of the union as a whole."""
    args = typing.get_args(hint)
    if value is None and type(None) in args:
        return None
    options = [a for a in args if a is not type(None)]
    for option in options[:-1]:
        try:
            return read_value(value, option, where)
        except InputError:
            continue
    try:
        return read_value(value, options[-1], where)
    except InputError:
        if len(options) == 1:
            raise
        raise expected(where, hint, value) from None


def within_depth(data: Any, limit: int) -> bool:
    """Whether arrays and objects nest at most `limit` deep (walked without recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth >= limit:
                    return False
                stack.append((child, depth + 1))
    return True


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number (an undefined value is null)")


def parse_json(text: str) -> Any:
    """Strict JSON (no NaN or Infinity) nested at most MAX_DEPTH levels; InputError otherwise."""
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise InputError(f"not a macs-audit report: nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:
        raise InputError(f"not valid JSON: {exc}") from None
    if not within_depth(data, MAX_DEPTH):
        raise InputError(f"not a macs-audit report: nested more than {MAX_DEPTH} levels deep")
    return data


@dataclasses.dataclass
class Section:
    """Base of the Report's sections; see the module docstring."""

    extra_keys: dict[str, Any] = dataclasses.field(default_factory=dict, kw_only=True)
    _keys: list[str] = dataclasses.field(default_factory=list, kw_only=True, repr=False, compare=False)

    @classmethod
    def json_keys(cls) -> dict[str, str]:
        """{JSON key: field name} of every schema field, in field order."""
        return {
            f.metadata.get("key", f.name): f.name
            for f in dataclasses.fields(cls)
            if f.name not in ("extra_keys", "_keys")
        }

    def at(self, key: str) -> Any:
        """The value the JSON holds under `key` (a field's, or a key this version does not name); None if absent."""
        name = self.json_keys().get(key)
        return getattr(self, name) if name is not None else self.extra_keys.get(key)

    @classmethod
    def from_dict(cls: type[S], data: Mapping[str, Any], where: str = "") -> S:
        """Read a section, checking every key the schema names against its field's type (see `read_value`).
        `where`: the section's JSON path in the report (`clean`, `views[3]`), which messages name."""
        where = where or cls.__name__
        if not isinstance(data, Mapping):
            raise expected(where, cls, data)
        hints, names = field_types(cls), cls.json_keys()
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            if key in names:
                kwargs[names[key]] = read_value(value, hints[names[key]], f"{where}.{key}")
            else:
                extra[key] = value
        fields = {f.name: f for f in dataclasses.fields(cls)}
        missing = [key for key, name in names.items() if name not in kwargs and required(fields[name])]
        if missing:
            raise InputError(f"{where}.{missing[0]}: missing (a required key)")
        section = cls(**kwargs, extra_keys=extra)
        section._keys = list(data)
        return section

    @classmethod
    def of(cls: type[S], **values: Any) -> S:
        """A section built from its fields (by the audit, not read from JSON): its JSON holds the keys of
        `values` in their order, a None one as null, as a section read with those keys does."""
        section = cls(**values)
        keys = {name: key for key, name in cls.json_keys().items()}
        section._keys = [keys[name] for name in values]
        return section

    @classmethod
    def from_dict_or_none(cls: type[S], data: Mapping[str, Any] | None, where: str = "") -> S | None:
        return None if data is None else cls.from_dict(data, where)

    def to_dict(self) -> dict[str, Any]:
        names = self.json_keys()
        fields = {f.name: f for f in dataclasses.fields(self)}
        out: dict[str, Any] = {}
        for key in self._keys:  # the order it was read in
            if key in names:
                out[key] = plain(getattr(self, names[key]))
            elif key in self.extra_keys:
                out[key] = plain(self.extra_keys[key])
        for key, name in names.items():
            value = getattr(self, name)
            if key not in out and (value is not None or fields[name].metadata.get("null")):
                out[key] = plain(value)
        for key, value in self.extra_keys.items():
            out.setdefault(key, plain(value))
        return out
