"""A strict YAML loader for scenario and profile files and `--set` values.

PyYAML's `safe_load` is safe against code execution but not against mistakes or hostile input:

* duplicate keys: the last one silently wins, so a scenario that sets `policy` twice runs the
  second and nobody notices. Here they are an error naming both lines (explicit keys only: a key
  that overrides one merged in with `<<: *anchor` is what merge keys are for);
* aliases: `&a` / `*a` share one node, and a few nested aliases (a "billion laughs" document)
  expand to billions of nodes once anything walks the data (validation, deep copies, dumps),
  which hangs the process. Aliases stay allowed, but the expanded size of the document is
  counted before it is constructed, without expanding it, and a document beyond
  `MAX_EXPANDED_NODES` is refused, as is an alias that contains itself;
* nesting: composing is recursive, so `[[[[...` ten thousand deep ends in a RecursionError.
  Nesting beyond `MAX_DEPTH` is refused while composing.

YAML means what the user typed. PyYAML reads YAML 1.1, whose implicit types surprise: variant
names `on:` and `off:` became the booleans True and False, `010` the octal 8, `1:30` the
sexagesimal 90, `1_000` a thousand and `2024-01-01` a date. Two rules undo that:

* a key is the text the user typed: a plain key is never resolved (`on:`, `1:`, `~:` are the
  strings "on", "1", "~"), and a key that is not a string (one tagged `!!int`, a list, a
  mapping) is refused, naming its line. Only the merge key `<<` keeps its meaning;
* a plain value is read as a boolean, a number or null only where YAML 1.1 and YAML 1.2 (the
  current version, whose core schema is JSON's) agree: `true`/`false` (any case PyYAML knows),
  `null`/`~`/nothing, decimal integers without underscores or leading zeros, `0x` hex,
  floats written with a point (`1.5`, `2.0e-3`, `.inf`). Everything else (`yes`, `no`, `on`,
  `off`, `010`, `1_000`, `1:30`, `1e3`, `2024-01-01`, `=`) stays the string typed.

A string is never lost: the schema (pydantic, lax) reads it as the type its field wants, so
`prefix_caching: yes` is still true, `num_requests: 1_000` a thousand and `num_requests: 010`
ten (decimal, as typed), while `name: on` stays "on" and `warmup_s: 1:30` is refused as not a
number. Nothing read as a non-string here is a string YAML 1.1 writes plainly, so anything
PyYAML dumps (a resolved scenario, a profile) reads back as it was.

Every problem is a `ScenarioError` whose message is the compiler-style `file:line:col: reason`.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError

from sim.errors import ScenarioError

MAX_DEPTH = 64
MAX_EXPANDED_NODES = 200_000
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"

# The implicit types of plain scalars: the forms YAML 1.1 (PyYAML) and YAML 1.2's core schema
# read alike; everything else stays a string (see the module docstring).
_IMPLICIT: list[tuple[str, str, str]] = [
    ("bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
    ("null", r"~|null|Null|NULL|", "~nN"),
    ("int", r"[-+]?(?:0|[1-9][0-9]*)|0x[0-9a-fA-F]+", "-+0123456789"),
    (
        "float",
        r"[-+]?[0-9]+\.[0-9]*(?:[eE][-+][0-9]+)?|\.[0-9]+(?:[eE][-+][0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
        "-+0123456789.",
    ),
    ("merge", r"<<", "<"),
]


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    return f"a value tagged {node.tag.replace('tag:yaml.org,2002:', '!!')} (drop the tag)"


class _StrictLoader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._tagged: set[int] = set()  # scalars whose tag the user wrote (`!!int 1`)

    def compose_scalar_node(self, anchor: Any) -> ScalarNode:
        tag = self.peek_event().tag
        node = super().compose_scalar_node(anchor)
        if tag not in (None, "!"):
            self._tagged.add(id(node))
        return node

    def _key(self, node: Node) -> Any:
        """The key a key node stands for: the text of a plain one, as typed."""
        if isinstance(node, ScalarNode) and id(node) not in self._tagged:
            return node.value
        key = self.construct_object(node, deep=True)
        if not isinstance(key, str):
            raise ConstructorError(
                None,
                None,
                f"a key must be a string, not {_kind(node)}",
                node.start_mark,
            )
        return key

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            node: Node = super().compose_node(parent, index)  # type: ignore[assignment]
            return node
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, MappingNode):
            return super().construct_mapping(node, deep)  # type: ignore[arg-type]
        first_line: dict[str, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self._key(key_node)
            if key in first_line:
                raise ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first given on line {first_line[key] + 1})",
                    key_node.start_mark,
                )
            first_line[key] = key_node.start_mark.line
        self.flatten_mapping(node)
        # merged keys come first, so the mapping's own keys override them
        mapping: dict[str, Any] = {}
        for key_node, value_node in node.value:
            mapping[self._key(key_node)] = self.construct_object(value_node, deep=deep)
        return mapping


# a fresh table, not PyYAML's YAML 1.1 one (add_implicit_resolver copies the parent's table
# only while the class has none of its own)
_StrictLoader.yaml_implicit_resolvers = {}
for _name, _pattern, _first in _IMPLICIT:
    _StrictLoader.add_implicit_resolver(
        f"tag:yaml.org,2002:{_name}",
        re.compile(f"^(?:{_pattern})$"),
        [*_first, ""] if _name == "null" else list(_first),  # "": an empty value is null
    )


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_expansion(root: Node) -> None:
    """Refuse a document whose aliases expand beyond `MAX_EXPANDED_NODES`, or loop.

    Sizes are memoized per node, so this walks each distinct node once (iteratively: the depth
    is bounded, but there is no reason to recurse)."""
    size: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            open_nodes.discard(key)
            total = 1 + sum(size[id(child)] for child in _children(node))
            if total > MAX_EXPANDED_NODES:
                raise ComposerError(
                    None,
                    None,
                    f"aliases expand this document beyond {MAX_EXPANDED_NODES} values (an alias "
                    "bomb?); write the values out instead",
                    node.start_mark,
                )
            size[key] = total
            continue
        if key in size:
            continue
        if key in open_nodes:
            raise ComposerError(None, None, "an alias refers to itself", node.start_mark)
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in size)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _error(exc: yaml.YAMLError, file: str) -> ScenarioError:
    """`file:line:col: reason` from a PyYAML error (marks are 0-based)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        reason = _one_line(exc.problem or "invalid YAML")
        if exc.context and exc.context_mark is not None:
            reason += f" ({_one_line(exc.context)} on line {exc.context_mark.line + 1})"
        elif exc.context:
            reason += f" ({_one_line(exc.context)})"
        return ScenarioError(reason, file=f"{file}:{mark.line + 1}:{mark.column + 1}")
    return ScenarioError(f"not valid YAML: {_one_line(str(exc))}", file=file)


def load_yaml(text: str, file: str) -> Any:
    """Parse one YAML document strictly (see the module docstring); `file` names it in errors."""
    try:
        loader = _StrictLoader(text)
    except ReaderError as exc:  # a control character: the reader checks the text up front
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise ScenarioError(
            f"character #x{exc.character:04x} is not allowed in YAML",
            file=f"{file}:{line}:{column}",
        ) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise _error(exc, file) from None
    except RecursionError:
        raise ScenarioError(f"nested too deeply (at most {MAX_DEPTH} levels)", file=file) from None
    finally:
        loader.dispose()
