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

Every problem is a `ScenarioError` whose message is the compiler-style `file:line:col: reason`.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, SequenceNode
from yaml.reader import ReaderError

from sim.errors import ScenarioError

MAX_DEPTH = 64
MAX_EXPANDED_NODES = 200_000
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

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
        if isinstance(node, MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in first_line
                except TypeError:
                    continue  # an unhashable key: the base constructor reports it
                if duplicate:
                    raise ConstructorError(
                        None,
                        None,
                        f"duplicate key {key!r} (first given on line {first_line[key] + 1})",
                        key_node.start_mark,
                    )
                first_line[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)  # type: ignore[arg-type]


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
