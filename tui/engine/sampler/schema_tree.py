"""A JSON schema read into typed nodes, as llama.cpp reads one before converting it
(``common_chat_schema_from_json`` in llama.cpp's ``common/json-schema.cpp``).

The reading decides what the grammar can enforce: an integer's ``minimum``/``maximum`` (a
fractional bound rounded inwards; ``exclusiveMinimum``/``exclusiveMaximum`` moved one inwards,
used only where the inclusive bound is absent), a string's ``pattern``, ``format``,
``minLength``/``maxLength``, an array's ``minItems``/``maxItems``, ``$ref`` into the same
document, ``anyOf``/``oneOf``/``allOf``, ``enum`` and ``const``. Errors are llama.cpp's
sentences ("JSON schema error at #/properties/a: ...").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class SchemaError(ValueError):
    """The schema cannot be read (llama.cpp's words)."""


@dataclass
class Node:
    kind: (
        str  # any ref anyOf allOf const enum null boolean number integer string array tuple object
    )


@dataclass
class Ref(Node):
    ref: str = ""
    target: Node | None = None


@dataclass
class Alternatives(Node):  # anyOf (oneOf reads as anyOf) and allOf
    children: list[Node] = field(default_factory=list)


@dataclass
class Values(Node):  # const (one value) and enum
    values: list[Any] = field(default_factory=list)


@dataclass
class Integer(Node):
    minimum: int = INT64_MIN
    maximum: int = INT64_MAX


@dataclass
class String(Node):
    pattern: str = ""
    format: str = ""  # "", "date", "time", "date-time", "uuid"
    min_length: int = 0
    max_length: int = -1


@dataclass
class Array(Node):
    items: Node = field(default_factory=lambda: Node("any"))
    min_items: int = 0
    max_items: int = -1


@dataclass
class Tuple(Node):
    items: list[Node] = field(default_factory=list)


@dataclass
class Prop:
    name: str
    schema: Node
    required: bool


@dataclass
class Object(Node):
    properties: list[Prop] = field(default_factory=list)
    additional: Node | None = None


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return is_int(v) or isinstance(v, float)


def _clamp64(n: int) -> int:
    return max(INT64_MIN, min(INT64_MAX, n))


class _Reader:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.refs: dict[str, Node | None] = {}
        self.pending: list[Ref] = []

    @staticmethod
    def fail(path: str, msg: str) -> SchemaError:
        return SchemaError(f"JSON schema error at {path}: {msg}")

    def counts(self, schema: dict, what: str, path: str) -> tuple[int, int]:
        """``min<what>`` and ``max<what>`` (Items, Length): 0 and -1 (no limit) when absent."""
        out = []
        for key, default in ((f"min{what}", 0), (f"max{what}", -1)):
            v = schema.get(key, default)
            if key in schema and (not is_int(v) or v < 0):
                raise self.fail(path, f"{key} must be a non-negative integer")
            out.append(int(min(v, 2**31 - 1)))
        return out[0], out[1]

    def bound(self, schema: dict, key: str, path: str, round_up: bool) -> int:
        v = schema[key]
        if is_int(v):
            return _clamp64(v)
        if not is_number(v):
            raise self.fail(path, f"{key} must be a number")
        if not math.isfinite(v):
            return INT64_MAX if v > 0 else INT64_MIN
        return _clamp64(math.ceil(v) if round_up else math.floor(v))

    def format(self, schema: dict, path: str) -> str:
        if "format" not in schema:
            return ""
        f = schema["format"]
        if not isinstance(f, str):
            raise self.fail(path, "format must be a string")
        if f in ("date", "time", "date-time"):
            return f
        if f == "uuid" or (len(f) == 5 and f.startswith("uuid") and "1" <= f[4] <= "5"):
            return "uuid"
        return ""

    def resolve(self, ref: str, path: str) -> Any:
        target = self.root
        for sel in ref[1:].split("/")[1:]:
            if isinstance(target, dict) and sel in target:
                target = target[sel]
            elif isinstance(target, list):
                idx = int(sel) if sel.isdigit() else len(target)
                if idx >= len(target):
                    raise self.fail(path, f"cannot resolve $ref {ref}, {sel} is out of range")
                target = target[idx]
            else:
                raise self.fail(path, f"cannot resolve $ref {ref}, {sel} not found")
        return target

    def ref(self, value: Any, path: str) -> Node:
        if not isinstance(value, str):
            raise self.fail(path, "$ref must be a string")
        if not value.startswith("#/"):
            raise self.fail(
                path,
                f"unsupported $ref {value}, only references into the same document are supported",
            )
        if value not in self.refs:
            self.refs[value] = None  # a cycle back to this $ref stops here
            self.refs[value] = self.node(self.resolve(value, path), value)
        node = Ref("ref", value)
        self.pending.append(node)
        return node

    def alternatives(self, kind: str, alts: Any, path: str) -> Node:
        if not isinstance(alts, list):
            raise self.fail(path, "must be an array of schemas")
        if not alts:
            raise self.fail(path, "must not be empty")
        return Alternatives(kind, [self.node(a, f"{path}/{i}") for i, a in enumerate(alts)])

    def object(self, schema: dict, path: str) -> Node:
        node = Object("object")
        req = schema.get("required")
        required = {n for n in req if isinstance(n, str)} if isinstance(req, list) else set()
        if "properties" in schema:
            props = schema["properties"]
            if not isinstance(props, dict):
                raise self.fail(path, "properties must be an object")
            for name, prop in props.items():
                sub = self.node(prop, f"{path}/properties/{name}")
                node.properties.append(Prop(name, sub, name in required))
        if "additionalProperties" in schema:
            extra = schema["additionalProperties"]
            if isinstance(extra, bool):
                node.additional = Node("any") if extra else None
            elif isinstance(extra, dict):
                node.additional = self.node(extra, f"{path}/additionalProperties")
            else:
                raise self.fail(path, "additionalProperties must be a boolean or a schema")
        elif "properties" not in schema:
            node.additional = Node("any")  # {"type": "object"} alone: any object
        return node

    def array(self, schema: dict, path: str) -> Node:
        node = Array("array")
        if "items" in schema or "prefixItems" in schema:
            key = "items" if "items" in schema else "prefixItems"
            items = schema[key]
            if isinstance(items, list):
                return Tuple(
                    "tuple", [self.node(x, f"{path}/{key}/{i}") for i, x in enumerate(items)]
                )
            node.items = self.node(items, f"{path}/{key}")
        node.min_items, node.max_items = self.counts(schema, "Items", path)
        return node

    def string(self, schema: dict, path: str) -> Node:
        node = String("string")
        if "pattern" in schema:
            if not isinstance(schema["pattern"], str):
                raise self.fail(path, "pattern must be a string")
            node.pattern = schema["pattern"]
        node.format = self.format(schema, path)
        node.min_length, node.max_length = self.counts(schema, "Length", path)
        return node

    def integer(self, schema: dict, path: str) -> Node:
        node = Integer("integer")
        if "minimum" in schema:
            node.minimum = self.bound(schema, "minimum", path, True)
        elif "exclusiveMinimum" in schema:
            node.minimum = _clamp64(self.bound(schema, "exclusiveMinimum", path, False) + 1)
        if "maximum" in schema:
            node.maximum = self.bound(schema, "maximum", path, False)
        elif "exclusiveMaximum" in schema:
            node.maximum = _clamp64(self.bound(schema, "exclusiveMaximum", path, True) - 1)
        return node

    def node(self, schema: Any, path: str) -> Node:
        if not isinstance(schema, dict):
            raise self.fail(path, "schema must be an object")
        if "$ref" in schema:
            return self.ref(schema["$ref"], path)
        if "oneOf" in schema or "anyOf" in schema:
            key = "oneOf" if "oneOf" in schema else "anyOf"
            return self.alternatives("anyOf", schema[key], f"{path}/{key}")
        kind = schema.get("type")
        if isinstance(kind, list):  # {"type": ["a", "b"]} is anyOf [{"type": "a"}, {"type": "b"}]
            if not kind:
                raise self.fail(path, "type must not be empty")
            alts = [
                self.node({**schema, "type": t}, f"{path}/type/{i}") for i, t in enumerate(kind)
            ]
            return Alternatives("anyOf", alts)
        if "const" in schema:
            return Values("const", [schema["const"]])
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise self.fail(path, "enum must be a non-empty array")
            return Values("enum", list(values))
        if kind is not None and not isinstance(kind, str):
            raise self.fail(path, "type must be a string or an array of strings")
        has_props = "properties" in schema or (
            "additionalProperties" in schema and schema["additionalProperties"] is not True
        )
        if not kind:
            if has_props:
                return self.object(schema, path)
            if "allOf" in schema:
                return self.alternatives("allOf", schema["allOf"], f"{path}/allOf")
            if "items" in schema or "prefixItems" in schema:
                return self.array(schema, path)
            stringy = ("pattern", "minLength", "maxLength")
            if any(k in schema for k in stringy) or self.format(schema, path):
                return self.string(schema, path)
            return Node("any")
        if (
            kind in ("object", "string")
            and "allOf" in schema
            and not (kind == "object" and has_props)
        ):
            return self.alternatives("allOf", schema["allOf"], f"{path}/allOf")
        if kind == "object":
            return self.object(schema, path)
        if kind == "string":
            return self.string(schema, path)
        if kind == "array":
            return self.array(schema, path)
        if kind == "integer":
            return self.integer(schema, path)
        if kind in ("number", "boolean", "null"):
            return Node(kind)
        raise self.fail(path, f"unrecognized type {kind}")


def read_schema(schema: Any) -> Node:
    """The schema's root node; every ``$ref`` node knows its target."""
    reader = _Reader(schema)
    root = reader.node(schema, "#")
    for ref in reader.pending:
        ref.target = reader.refs[ref.ref]
    return root
