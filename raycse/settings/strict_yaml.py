"""YAML as a settings file needs it: a key written twice is an error, not a silent "the last one wins".

PyYAML (like most YAML readers) keeps the last of two equal keys, so a file that sets `loss: focal` at the top and
`loss: simcse` further down runs a SimCSE search. `load_settings` reads a document with PyYAML's safe loader, but
walks the document's node tree first and refuses any mapping that holds a key twice, naming the key (its path
from the top) and both lines. Merge keys (`<<: *defaults`) are YAML's own way to override and stay allowed.
Every failure is a `ConfigError` naming the file and, where YAML knows it, the line.
"""
from __future__ import annotations

from typing import Any

import yaml

from raycse.errors import ConfigError, first_line, shown

MERGE_TAG = "tag:yaml.org,2002:merge"
NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
NUMBER_DIGITS = 4000  # Python refuses to read an integer of more than 4300 digits


def load_settings(text: str, where: str) -> Any:
    """The document in `text` (None when it is empty), with duplicate keys refused."""
    try:
        loader = yaml.SafeLoader(text)  # the reader refuses control characters here
    except yaml.reader.ReaderError as err:
        char = f"U+{err.character:04X}" if isinstance(err.character, int) else repr(err.character)
        raise ConfigError(f"{where}: line {text.count(chr(10), 0, err.position) + 1}: the character {char} is not "
                          "allowed in a YAML file") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicates(node, where)
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or first_line(err)
        raise ConfigError(f"{where}: YAML syntax error{line}: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply to be a settings file") from None
    finally:
        loader.dispose()


def _refuse_duplicates(root: yaml.Node, where: str) -> None:
    """Depth-first over the node tree (iteratively: a hostile file may nest deeper than Python's stack)."""
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    seen_nodes: set[int] = set()  # an alias points at a node already walked
    while stack:
        node, path = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first_line_of: dict[tuple[str, str], int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == MERGE_TAG:
                    stack.append((value_node, path))
                    continue
                if isinstance(key_node, yaml.ScalarNode):
                    key = (key_node.tag, key_node.value)
                    line = key_node.start_mark.line + 1
                    if key in first_line_of:
                        name = f"{path}.{key_node.value}" if path else key_node.value
                        raise ConfigError(f"{where}: duplicate key {shown(name)} at lines {first_line_of[key]} and "
                                          f"{line} (YAML would silently keep the second)")
                    first_line_of[key] = line
                    child = f"{path}.{key_node.value}" if path else key_node.value
                else:
                    child = path
                stack.append((value_node, child))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, path) for item in node.value)
        elif node.tag in NUMBER_TAGS and len(node.value) > NUMBER_DIGITS:
            raise ConfigError(f"{where}: {path or 'the document'}: a number of {len(node.value):,} digits at line "
                              f"{node.start_mark.line + 1} (no setting takes one)")
