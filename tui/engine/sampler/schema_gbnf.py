"""A JSON schema turned into GBNF as llama.cpp turns it (``json_schema_to_grammar`` in
``common/json-schema-to-grammar.cpp``, what ``llama-server --json-schema`` and a request's
``json_schema`` use): the same rules under the same names, in the same order, so that
``-j/--json-schema`` constrains a reply here exactly as it does in llama-server (the tests
compare the text with the grammar llama-server reports in ``generation_settings``).

A ``pattern`` with no grammar equivalent (lookarounds, ``\\d``, an anchor inside) becomes any
string, with a warning, as in llama.cpp; one that is not a regular expression is an error.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .schema_pattern import Invalid, Unsupported, pattern_rule
from .schema_rules import (
    INT_MAX,
    PRIMITIVE_RULES,
    RESERVED_NAMES,
    SPACE_RULE,
    STRING_FORMAT_RULES,
    Builtin,
    format_literal,
    int_range,
    repetition,
)
from .schema_tree import (
    INT64_MAX,
    INT64_MIN,
    Alternatives,
    Array,
    Integer,
    Node,
    Object,
    Ref,
    String,
    Tuple,
    Values,
    read_schema,
)

_INVALID_RULE_CHARS = re.compile(r"[^a-zA-Z0-9-]+")


class ConversionError(ValueError):
    """The schema converts to no grammar (llama.cpp's words)."""


def dump(value: Any) -> str:
    """A JSON value as llama.cpp writes it: compact, non-ASCII as is."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class Converter:
    def __init__(self, dotall: bool = False) -> None:
        self.dotall = dotall
        self.rules: dict[str, str] = {"space": SPACE_RULE}
        self.resolving: set[str] = set()
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def add_rule(self, name: str, rule: str) -> str:
        key = _INVALID_RULE_CHARS.sub("-", name)
        if key not in self.rules or self.rules[key] == rule:
            self.rules[key] = rule
            return key
        i = 0
        while f"{key}{i}" in self.rules and self.rules[f"{key}{i}"] != rule:
            i += 1
        self.rules[f"{key}{i}"] = rule
        return f"{key}{i}"

    def add_primitive(self, name: str, rule: Builtin) -> str:
        n = self.add_rule(name, rule.content)
        for dep in rule.deps:
            dep_rule = PRIMITIVE_RULES.get(dep) or STRING_FORMAT_RULES.get(dep)
            if dep_rule is None:
                self.errors.append(f"Rule {dep} not known")
            elif dep not in self.rules:
                self.add_primitive(dep, dep_rule)
        return n

    def primitive(self, rule_name: str, kind: str) -> str:
        return self.add_primitive("root" if rule_name == "root" else kind, PRIMITIVE_RULES[kind])

    # -- patterns ----------------------------------------------------------------------------
    def visit_pattern(self, pattern: str, name: str) -> str:
        saved = dict(self.rules)
        try:
            return self._pattern_to_rule(pattern, name)
        except Unsupported as e:
            self.rules = saved
            self.warnings.append(f"pattern {pattern} is not supported ({e}), accepting any string")
            return self.add_rule(name, self.add_primitive("string", PRIMITIVE_RULES["string"]))
        except Invalid as e:
            self.rules = saved
            self.errors.append(f"Invalid pattern {pattern}: {e}")
            return ""

    def _pattern_to_rule(self, pattern: str, name: str) -> str:
        if len(pattern) < 2 or pattern[0] != "^" or pattern[-1] != "$":
            raise Unsupported("not anchored with '^' and '$'")
        rule = pattern_rule(self.add_rule, self.dotall, pattern[1:-1], name)
        return self.add_rule(name, f'"\\"" ({rule}) "\\""')

    def not_strings(self, strings: list[str]) -> str:
        """A JSON string that is none of ``strings`` (a trie of their characters)."""
        trie: dict[str, Any] = {}
        ends: set[int] = set()
        for s in strings:
            node = trie
            for ch in s:
                node = node.setdefault(ch, {})
            ends.add(id(node))
        char = self.add_primitive("char", PRIMITIVE_RULES["char"])
        out = ['["] ( ']

        def visit(node: dict[str, Any]) -> None:
            alts = sorted(node.items(), key=lambda kv: ord(kv[0]))
            for i, (c, child) in enumerate(alts):
                out.append(("" if i == 0 else " | ") + f"[{c}]")
                if child:
                    out.append(" (")
                    visit(child)
                    out.append(")")
                else:
                    out.append(f" {char}+")
            if node:
                out.append(f' | [^"{"".join(c for c, _ in alts)}] {char}*')

        visit(trie)
        out.append(" )" + ("" if id(trie) in ends else "?") + ' ["]')
        return "".join(out)

    # -- schemas -----------------------------------------------------------------------------
    def resolve_ref(self, node: Ref) -> str:
        fragment = node.ref.split("#", 1)[1] if "#" in node.ref else node.ref
        name = "ref" + _INVALID_RULE_CHARS.sub("-", fragment)
        if name not in self.rules and node.ref not in self.resolving:
            if node.target is None:
                self.errors.append(f"Unresolved $ref {node.ref}")
                return ""
            self.resolving.add(node.ref)
            name = self.visit(node.target, name)
            self.resolving.discard(node.ref)
        return name

    def object_rule(
        self, props: list[tuple[str, Node]], required: set[str], name: str, extra: Node | None
    ) -> str:
        dash = name + ("-" if name else "")
        req: list[str] = []
        opt: list[str] = []
        kv: dict[str, str] = {}
        names: list[str] = []
        for prop, schema in props:
            value = self.visit(schema, dash + prop)
            kv[prop] = self.add_rule(
                f"{dash}{prop}-kv", f'{format_literal(dump(prop))} space ":" space {value}'
            )
            (req if prop in required else opt).append(prop)
            names.append(prop)
        if extra is not None:
            sub = dash + "additional"
            value = (
                self.visit(extra, sub + "-value")
                if extra.kind != "any"
                else self.add_primitive("value", PRIMITIVE_RULES["value"])
            )
            key = (
                self.add_rule(sub + "-k", self.not_strings(names))
                if names
                else self.add_primitive("string", PRIMITIVE_RULES["string"])
            )
            kv["*"] = self.add_rule(sub + "-kv", f'{key} ":" space {value}')
            opt.append("*")
        if not req and not opt:
            return '"{" space "}"'
        rule = '"{" space ' + ' "," space '.join(kv[k] for k in req)
        if opt:
            rule += " ("
            if req:
                rule += ' "," space ( '

            def chain(ks: list[str], first_optional: bool) -> str:
                k = ks[0]
                comma = f'( "," space {kv[k]} )'
                if first_optional:
                    res = comma + ("*" if k == "*" else "?")
                else:
                    res = kv[k] + (f" {comma}*" if k == "*" else "")
                if len(ks) > 1:
                    res += " " + self.add_rule(f"{dash}{k}-rest", chain(ks[1:], True))
                return res

            rule += " | ".join(chain(opt[i:], False) for i in range(len(opt)))
            if req:
                rule += " )"
            rule += " )?"
        return rule + ' space "}"'

    def all_of(self, node: Alternatives, name: str, rule_name: str) -> str:
        required: set[str] = set()
        props: list[tuple[str, Node]] = []
        enums: dict[str, int] = {}

        def add(comp: Node, is_required: bool) -> None:
            if isinstance(comp, Ref):
                if comp.target is not None:
                    add(comp.target, is_required)
            elif isinstance(comp, Object):
                for p in comp.properties:
                    props.append((p.name, p.schema))
                    if is_required:
                        required.add(p.name)
            elif isinstance(comp, Values) and comp.kind == "enum":
                for v in comp.values:
                    lit = format_literal(dump(v))
                    enums[lit] = enums.get(lit, 0) + 1

        for child in node.children:
            if isinstance(child, Alternatives) and child.kind == "anyOf":
                for alt in child.children:
                    add(alt, False)
            else:
                add(child, True)
        both = [k for k in sorted(enums, key=str.encode) if enums[k] == len(node.children)]
        if both:
            return self.add_rule(rule_name, "(" + " | ".join(both) + ")")
        return self.add_rule(rule_name, self.object_rule(props, required, name, None))

    def visit(self, node: Node, name: str) -> str:
        rule_name = name + "-" if name in RESERVED_NAMES else (name or "root")
        sub = name + ("-" if name else "")
        if isinstance(node, Ref):
            return self.add_rule(rule_name, self.resolve_ref(node))
        if isinstance(node, Alternatives):
            if node.kind == "allOf":
                return self.all_of(node, name, rule_name)
            alt = name + ("-" if name else "alternative-")
            rules = [self.visit(c, f"{alt}{i}") for i, c in enumerate(node.children)]
            return self.add_rule(rule_name, " | ".join(rules))
        if isinstance(node, Values):
            lits = [format_literal(dump(v)) for v in node.values]
            if node.kind == "const":
                return self.add_rule(rule_name, lits[0])
            return self.add_rule(rule_name, "(" + " | ".join(lits) + ")")
        if isinstance(node, Object):
            if (
                not node.properties
                and node.additional is not None
                and node.additional.kind == "any"
            ):
                return self.add_rule(
                    rule_name, self.add_primitive("object", PRIMITIVE_RULES["object"])
                )
            req = {p.name for p in node.properties if p.required}
            props = [(p.name, p.schema) for p in node.properties]
            return self.add_rule(rule_name, self.object_rule(props, req, name, node.additional))
        if isinstance(node, Tuple):
            items = [self.visit(x, f"{sub}tuple-{i}") for i, x in enumerate(node.items)]
            return self.add_rule(rule_name, '"[" space ' + ' "," space '.join(items) + ' space "]"')
        if isinstance(node, Array):
            if node.items.kind == "any" and node.min_items == 0 and node.max_items < 0:
                return self.primitive(rule_name, "array")
            item = self.visit(node.items, sub + "item")
            most = INT_MAX if node.max_items < 0 else node.max_items
            body = repetition(item, node.min_items, most, '"," space')
            return self.add_rule(rule_name, f'"[" space {body} space "]"')
        if isinstance(node, String):
            return self.string(node, rule_name)
        if isinstance(node, Integer):
            if node.minimum == INT64_MIN and node.maximum == INT64_MAX:
                return self.primitive(rule_name, "integer")
            return self.add_rule(rule_name, f"({int_range(node.minimum, node.maximum)})")
        if node.kind in ("number", "boolean", "null"):
            return self.primitive(rule_name, node.kind)
        return self.add_rule(rule_name, self.add_primitive("value", PRIMITIVE_RULES["value"]))

    def string(self, node: String, rule_name: str) -> str:
        if node.pattern:
            return self.visit_pattern(node.pattern, rule_name)
        if node.format == "uuid":
            return self.primitive(rule_name, "uuid")
        if node.format:
            prim = node.format + "-string"
            return self.add_rule(rule_name, self.add_primitive(prim, STRING_FORMAT_RULES[prim]))
        if node.min_length > 0 or node.max_length >= 0:
            char = self.add_primitive("char", PRIMITIVE_RULES["char"])
            most = INT_MAX if node.max_length < 0 else node.max_length
            return self.add_rule(
                rule_name, f'"\\"" {repetition(char, node.min_length, most)} "\\""'
            )
        return self.primitive(rule_name, "string")

    def grammar(self) -> str:
        """The rules in llama.cpp's order (a ``std::map``: sorted by name, byte-wise)."""
        keys = sorted(self.rules, key=lambda k: k.encode("utf-8"))
        return "".join(f"{k} ::= {self.rules[k]}\n" for k in keys)


def json_schema_to_grammar(schema: Any) -> str:
    """llama.cpp's grammar for a parsed JSON schema; :class:`ConversionError` with llama.cpp's
    reason when there is none."""
    try:
        root = read_schema(schema)
    except ValueError as e:
        raise ConversionError(str(e)) from None
    conv = Converter()
    conv.visit(root, "")
    if conv.errors:
        raise ConversionError("; ".join(conv.errors))
    return conv.grammar()
