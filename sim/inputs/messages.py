"""Schema errors in words a person reads: every problem, by key path, without pydantic's jargon.

pydantic reports `Unable to extract tag using discriminator 'name'` at `policy`, or
`Input should be greater than 0` at `policy.continuous.max_num_seqs`, with the union member it
tried in the location. `problems` turns a `ValidationError` into `(key path, reason)` pairs:
union members are dropped from the path (they are not keys the user wrote), the reason says
what the key must be (`missing `name`; one of static, continuous, chunked`, `must be > 0
(got 0)`), an unknown key gets the nearest known one as a suggestion, and the several reasons
pydantic gives for one key of a union type merge into one (`must be a string or a mapping`).
The walk follows the model classes themselves, so it needs no list of tags to keep up to date.
"""

from __future__ import annotations

import difflib
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from sim.errors import ScenarioError
from sim.inputs.strict_model import Boolean

_SIMPLE = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_parsing_size": "must be an integer of reasonable size",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "string_too_short": "must not be empty",
    "missing": "required key is missing",
}
_BOUNDS = {
    "greater_than": ("gt", ">"),
    "greater_than_equal": ("ge", ">="),
    "less_than": ("lt", "<"),
    "less_than_equal": ("le", "<="),
}


def _unwrap(tp: Any) -> Any:
    """Strip `Annotated[...]` and `Optional[...]`; a union stays a union."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) in (Union, types.UnionType):
        members = [a for a in get_args(tp) if a is not type(None)]
        if len(members) == 1:
            return _unwrap(members[0])
    return tp


def _members(tp: Any) -> list[Any]:
    if get_origin(tp) in (Union, types.UnionType):
        return [_unwrap(a) for a in get_args(tp) if a is not type(None)]
    return []


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _tags(member: Any) -> list[str]:
    """The literal values of a model's discriminator-like fields (`name`, `process`, `dist`)."""
    if not _is_model(member):
        return []
    out = []
    for field in member.model_fields.values():
        if get_origin(field.annotation) is Literal and len(get_args(field.annotation)) == 1:
            out += [str(a) for a in get_args(field.annotation)]
    return out


def locate(root: type[BaseModel], loc: tuple[Any, ...]) -> tuple[list[str], Any, Any]:
    """(key path as the user wrote it, the model holding the last key, the type at `loc`)."""
    tp: Any = root
    parent: Any = None
    parts: list[str] = []
    for part in loc:
        tp = _unwrap(tp)
        members = _members(tp)
        if members and isinstance(part, str):
            chosen = [m for m in members if part in _tags(m)]
            if chosen or not any(_is_model(m) and part in m.model_fields for m in members):
                tp = chosen[0] if chosen else None  # a union member, not a key
                continue
        if isinstance(part, str) and "[" in part:  # pydantic's label of a validator or a type
            continue
        parts.append(str(part))
        parent = tp if _is_model(tp) else None
        if _is_model(tp):
            field = tp.model_fields.get(part) if isinstance(part, str) else None
            tp = field.annotation if field is not None else None
        elif get_origin(tp) is list:
            tp = get_args(tp)[0]
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        else:
            tp = None
    return parts, parent, _unwrap(tp)


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _choices(text: str) -> str:
    """pydantic's "'a', 'b' or 'c'" as "a, b, c"."""
    return ", ".join(p.strip().strip("'") for p in text.replace(" or ", ", ").split(","))


def _reason(err: Any, parent: Any, here: Any) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        known = list(parent.model_fields) if _is_model(parent) else []
        close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
        if close:
            return f"unknown key (did you mean {close[0]}?)"
        return f"unknown key (expected one of {', '.join(known)})" if known else "unknown key"
    if kind in ("union_tag_not_found", "union_tag_invalid"):
        key = str(ctx.get("discriminator", "")).strip("'")
        tags = [t for m in _members(here) for t in _tags(m)]
        expected = ", ".join(tags) if tags else _choices(str(ctx.get("expected_tags", "")))
        if kind == "union_tag_not_found":
            return f"missing `{key}`; one of {expected}"
        return f"unknown {key} {ctx.get('tag')!r}; one of {expected}"
    if kind in _BOUNDS:
        name, op = _BOUNDS[kind]
        reason = f"must be {op} {_number(ctx.get(name))}"
    elif kind == "literal_error":
        choices = _choices(str(ctx.get("expected", "")))
        reason = f"must be one of {choices}" if "," in choices else f"must be {choices}"
    elif kind == "too_short":
        reason = f"must have at least {ctx.get('min_length')} item(s)"
    elif kind in ("value_error", "assertion_error"):
        reason = str(ctx.get("error", err["msg"]))
    else:
        reason = _SIMPLE.get(kind, err["msg"])
    value = err.get("input")
    if kind != "missing" and isinstance(value, (int, float, str, Boolean)):
        shown = repr(value) if not isinstance(value, str) or len(value) <= 60 else repr(value[:60])
        if not (isinstance(value, str) and shown in reason):  # a check may quote it already
            reason += f" (got {shown})"
    return reason


def _merge(reasons: list[str]) -> str:
    """One reason per key: the alternatives of a union joined ("must be a string or a mapping")."""
    if len(reasons) > 1 and all(r.startswith("must be ") for r in reasons):
        got = ""
        alternatives = []
        for r in reasons:
            head, sep, tail = r.partition(" (got ")
            alternatives.append(head.removeprefix("must be "))
            got = got or (sep + tail)
        return "must be " + " or ".join(dict.fromkeys(alternatives)) + got
    return "; ".join(dict.fromkeys(reasons))


def problems(exc: ValidationError, root: type[BaseModel]) -> list[tuple[str, str]]:
    """Every problem of `exc` as (dotted key path, reason), in pydantic's order, one per key;
    several required keys missing from one mapping are one problem naming them all."""
    found: dict[str, list[str]] = {}
    missing: dict[str, list[str]] = {}
    for err in exc.errors():
        parts, parent, here = locate(root, tuple(err["loc"]))
        cause = (err.get("ctx") or {}).get("error")
        extra_key = getattr(cause, "key", None)  # a cross-field check naming its key
        if isinstance(extra_key, str):
            parts.append(extra_key)
        if err["type"] == "missing" and parts:
            missing.setdefault(".".join(parts[:-1]), []).append(parts[-1])
        found.setdefault(".".join(parts), []).append(_reason(err, parent, here))
    for parent_path, keys in missing.items():
        if len(keys) > 1:  # {x: 1} given for a model: one line, not one per required key
            for key in keys:
                found.pop(".".join(p for p in (parent_path, key) if p), None)
            found[parent_path] = [f"required keys missing: {', '.join(keys)}"]
    return [(path, _merge(reasons)) for path, reasons in found.items()]


class Problems(ScenarioError):
    """Several problems in one line, each after its own full key path: a caller that blames
    errors without a key on a key of its own must not put that key in front of this one."""


def blamed_on(exc: ScenarioError, key: str | None) -> str | None:
    """The key path to report `exc` under when the caller's own key is `key`: the error's own
    path if it has one, none for a list of problems (they name their keys), else `key`."""
    if exc.path or isinstance(exc, Problems):
        return exc.path
    return key


def as_error(found: list[tuple[str, str]], file: str | None) -> ScenarioError:
    """One ScenarioError (one line) listing every problem."""
    if len(found) == 1:
        path, reason = found[0]
        return ScenarioError(reason, file=file, path=path or None)
    listed = "; ".join(f"{path}: {reason}" if path else reason for path, reason in found)
    return Problems(f"{len(found)} problems: {listed}", file=file)
