"""The parts protocols are narrow: each names only what the modules typed with it touch.

A stage module (``tui/engine/run/decode.py``, ``prompt.py`` ...) or a command module of the worker
(``chat.py``, ``stepping.py`` ...) is handed the session or the worker as a protocol of
``parts.py``, not as the class. A member a protocol declares that none of its users reads,
writes or calls is a dependency nobody has: this test names it. Read off the source with
``ast``: a user is a function with a parameter annotated with the protocol (its aliases
``x = engine`` too), or a class that keeps such a parameter as ``self.NAME`` (then
``self.NAME.member`` anywhere in the class), or a local annotated with it (``eng: PathSession |
None = w.engine.local``). Members a protocol inherits are checked on the
protocol that declares them."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import tui
from tests.support.ast_follow import bound_names

ROOT = Path(tui.__file__).parent
PARTS = ("engine/run/parts.py", "worker/parts.py")


def _protocols(source: str) -> dict[str, set[str]]:
    """Each Protocol class of ``source`` and the members it declares itself."""
    out = {}
    for cls in ast.parse(source).body:
        if not isinstance(cls, ast.ClassDef):
            continue
        if not any(ast.unparse(b).endswith("Protocol") for b in cls.bases):
            continue
        own = set()
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                own.add(node.target.id)
            elif isinstance(node, ast.FunctionDef):
                own.add(node.name)
        out[cls.name] = own
    return out


def _annotation(a: ast.expr | None) -> str | None:
    """The class an annotation names (``"Engine"``, ``Engine``, ``parts.Engine``)."""
    if a is None:
        return None
    text = a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else ast.unparse(a)
    return text.strip("'\"").split(".")[-1]


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    return fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs


def _chains(node: ast.AST, is_handle, names: set[str]) -> set[tuple[str, ...]]:
    """``(member,)`` and ``(member, sub)`` of every ``h.member`` / ``h.member.sub`` touched."""
    out: set[tuple[str, ...]] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and is_handle(n.value, names):
            out.add((n.attr,))
        if (
            isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Attribute)
            and is_handle(n.value.value, names)
        ):
            out.add((n.value.attr, n.attr))
    return out


def _scan(fn: ast.AST, is_handle) -> set[tuple[str, ...]]:
    """The chains ``fn`` touches through a handle (or a local alias of one), and through a
    local bound to a member of one (``eng = w.engine; eng.kv`` is ``("engine", "kv")``)."""
    names = bound_names(fn, set(), is_handle)
    found = _chains(fn, is_handle, names)

    def local(e: ast.expr, ns: set[str]) -> bool:
        return isinstance(e, ast.Name) and e.id in ns

    for member in {c[0] for c in found}:

        def of_member(e: ast.expr, _: set[str], m: str = member) -> bool:
            return isinstance(e, ast.Attribute) and e.attr == m and is_handle(e.value, names)

        subs = bound_names(fn, set(), of_member)
        if subs:
            found |= {(member, c[0]) for c in _chains(fn, local, subs)}
    return found


@functools.cache
def _parse(source: str) -> ast.Module:
    """One parse per source: the checks ask about each file once per protocol (read-only)."""
    return ast.parse(source)


def touched_chains(source: str, proto: str) -> set[tuple[str, ...]]:
    """What ``source`` touches of a ``proto`` it is handed: members, and members of members.
    A handle is something annotated with ``proto``, so a source without the name has none."""
    if proto not in source:
        return set()
    tree = _parse(source)
    found: set[tuple[str, ...]] = set()
    for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
        kept = set()  # self.NAME = a parameter typed proto
        for fn in [n for n in cls.body if isinstance(n, ast.FunctionDef)]:
            typed = {a.arg for a in _params(fn) if _annotation(a.annotation) == proto}
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
                    if node.value.id not in typed:
                        continue
                    for t in node.targets:
                        if isinstance(t, ast.Attribute) and ast.unparse(t.value) == "self":
                            kept.add(t.attr)
        for fn in [n for n in ast.walk(cls) if isinstance(n, ast.FunctionDef)] if kept else []:

            def self_kept(e: ast.expr, names: set[str], kept: set[str] = kept) -> bool:
                return (isinstance(e, ast.Name) and e.id in names) or (
                    isinstance(e, ast.Attribute)
                    and e.attr in kept
                    and ast.unparse(e.value) == "self"
                )

            found |= _scan(fn, self_kept)
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        typed = {a.arg for a in _params(fn) if _annotation(a.annotation) == proto}
        typed |= {  # a local typed with it: ``eng: PathSession | None = w.engine.local``
            n.target.id
            for n in ast.walk(fn)
            if isinstance(n, ast.AnnAssign)
            and isinstance(n.target, ast.Name)
            and (_annotation(n.annotation) or "").removesuffix(" | None") == proto
        }
        if typed:

            def param(e: ast.expr, names: set[str], typed: set[str] = typed) -> bool:
                return isinstance(e, ast.Name) and (e.id in typed or e.id in names)

            found |= _scan(fn, param)
    return found


def touched(source: str, proto: str) -> set[str]:
    """The members of ``proto`` that ``source`` touches through a handed object."""
    return {c[0] for c in touched_chains(source, proto)}


def _returns(source: str) -> dict[tuple[str, str], str]:
    """(protocol, member) -> the protocol that member gives (``WorkerParts.attention`` ->
    ``AttentionPart``): what is touched through it counts for that one."""
    out = {}
    for cls in ast.parse(source).body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                out[(cls.name, node.target.id)] = _annotation(node.annotation) or ""
            elif isinstance(node, ast.FunctionDef):
                out[(cls.name, node.name)] = _annotation(node.returns) or ""
    return out


# Not a part handed to a stage: the decode observers' interface, called on each observer.
NOT_PARTS = {"DecodeObserver"}


def unused_members() -> list[str]:
    sources = [p.read_text(encoding="utf-8") for p in sorted(ROOT.rglob("*.py"))]
    texts = {part: (ROOT / part).read_text(encoding="utf-8") for part in PARTS}
    protos = {name: (part, own) for part, t in texts.items() for name, own in _protocols(t).items()}
    gives = {k: v.replace(" | None", "") for t in texts.values() for k, v in _returns(t).items()}
    used: dict[str, set[str]] = {name: set() for name in protos}
    for name in protos:
        for src in sources:
            for chain in touched_chains(src, name):
                used[name].add(chain[0])
                inner = gives.get((name, chain[0]))
                if len(chain) == 2 and inner in used:
                    used[inner].add(chain[1])
    return [
        f"{part} {name}.{m}"
        for name, (part, own) in protos.items()
        if name not in NOT_PARTS
        for m in sorted(own - used[name])
    ]


# What a backend hands out (``backend.py``): the local session and the server facts. Their
# users do not get them as a parameter but from ``engine.local`` / ``w.require(...)`` /
# ``engine.server``: a local name bound to one (``eng = w.engine.local``, ``if (server :=
# engine.server)``) is a handle too.
FACETS = {"LocalSession": ("local", "require"), "ServerFacts": ("server",)}


def _facet(e: ast.expr, how: tuple[str, ...]) -> bool:
    """``x.local``, ``x.require(...)``, ``x.server`` (``how`` names which)."""
    if isinstance(e, ast.Call):
        e = e.func
    return isinstance(e, ast.Attribute) and e.attr in how


def facet_users(source: str, proto: str) -> set[str]:
    """The members of ``proto`` that ``source`` touches: through a parameter typed with it, a
    local bound to the facet, or the facet itself (``w.engine.local.fork()``)."""
    how = FACETS[proto]
    found = touched(source, proto)
    for fn in _functions_naming(source, how):
        names = {  # ``(x := w.engine.local)``, ``x: ForkSession = w.require("fork")``
            n.target.id
            for n in ast.walk(fn)
            if isinstance(n, ast.NamedExpr | ast.AnnAssign)
            and isinstance(n.target, ast.Name)
            and n.value is not None
            and _facet(n.value, how)
        }
        names |= bound_names(fn, names, lambda e, ns: _facet(e, how))

        def handle(e: ast.expr, ns: set[str]) -> bool:
            return (isinstance(e, ast.Name) and e.id in ns) or _facet(e, how)

        found |= {c[0] for c in _chains(fn, handle, names)}
    return found - set(how)


@functools.cache
def _functions_naming(source: str, how: tuple[str, ...]) -> list[ast.AST]:
    """The functions (and the functions around them) holding an ``x.<how>`` attribute: in any
    other, nothing is bound to the facet and no chain starts at it, so it adds nothing."""
    out: dict[ast.AST, None] = {}
    todo: list[tuple[ast.AST, tuple[ast.AST, ...]]] = [(_parse(source), ())]
    while todo:
        node, around = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            around = (*around, node)
        elif isinstance(node, ast.Attribute) and node.attr in how:
            out.update(dict.fromkeys(around))
        todo.extend((c, around) for c in ast.iter_child_nodes(node))
    return list(out)


def unused_facet_members() -> list[str]:
    sources = [p.read_text(encoding="utf-8") for p in sorted(ROOT.rglob("*.py"))]
    protos = _protocols((ROOT / "engine/run/backend.py").read_text(encoding="utf-8"))
    return [
        f"engine/run/backend.py {name}.{m}"
        for name in FACETS
        for m in sorted(protos[name] - set().union(*(facet_users(s, name) for s in sources)))
    ]


def test_the_facet_check_follows_a_local_session_out_of_the_backend():
    src = (
        "def f(w):\n    eng = w.engine.local\n    eng.fork()\n    w.require('x').verify_last()\n"
        "    e: 'P | None' = w.engine.local\n    e.drop_seq()\n"
        "def g(engine):\n    if (server := engine.server) is not None:\n        server.url\n"
    )
    assert facet_users(src, "LocalSession") == {"fork", "verify_last", "drop_seq"}
    assert facet_users(src, "ServerFacts") == {"url"}


def test_the_local_session_and_the_server_facts_name_only_what_their_users_touch():
    """``LocalSession`` adds to the stages' parts only what the worker, trace and verify use
    of a context in this process; ``ServerFacts`` only what the panes and the saved session
    read of a server."""
    left = unused_facet_members()
    assert left == [], "\n".join(left)


def test_the_check_finds_a_member_nobody_touches():
    parts = "class P(Protocol):\n    a: int\n    b: int\n    def c(self) -> None: ...\n"
    assert _protocols(parts) == {"P": {"a", "b", "c"}}
    user = (
        "def f(x: 'P'):\n    y = x\n    y.c()\n"
        "class K:\n    def __init__(self, p: P):\n        self.p = p\n"
        "    def g(self):\n        return self.p.a\n"
    )
    assert touched(user, "P") == {"a", "c"}  # b: declared, never touched
    assert touched("def h(w):\n    z: P | None = w.local\n    z.b\n", "P") == {"b"}
    assert touched(user, "Q") == set()


def test_every_parts_protocol_names_only_what_its_users_touch():
    left = unused_members()
    assert left == [], "\n".join(left)


def test_the_engine_stages_each_have_their_own_protocol():
    """No stage module is typed with the whole session: each names its own part."""
    stages = [
        p
        for room in ("run", "record")
        for p in sorted((ROOT / "engine" / room).glob("*.py"))
        if p.name not in ("parts.py", "backend.py")
    ]
    assert "engine/run/decode.py" in {str(p.relative_to(ROOT)) for p in stages}  # it reads them
    whole = [
        str(p.relative_to(ROOT))
        for p in stages
        if touched(p.read_text(encoding="utf-8"), "EngineParts")
    ]
    assert whole == []
    protos = _protocols((ROOT / "engine/run/parts.py").read_text(encoding="utf-8"))
    assert {"DecodeParts", "PromptParts", "PathParts", "ShiftParts", "SequenceParts"} <= set(
        protos
    )
    assert protos["EngineParts"] == set()  # all of them, nothing of its own


# A backend's facts are read through the protocol (``engine.server``, ``engine.local``), not
# probed by name: a ``getattr`` on one is a member no protocol names and mypy cannot check.
BACKEND_NAMES = {"engine", "eng", "backend", "local", "session", "server"}
BACKEND_TYPES = {"Backend", "Engine", "LocalSession", "ServerFacts", "RemoteBackend"}


def _is_backend(e: ast.expr, typed: set[str]) -> bool:
    """``engine``, ``w.engine``, ``self.w.engine``, a parameter typed as a backend."""
    name = e.attr if isinstance(e, ast.Attribute) else e.id if isinstance(e, ast.Name) else None
    return name in BACKEND_NAMES or (isinstance(e, ast.Name) and e.id in typed)


def backend_getattrs(source: str, where: str = "") -> list[str]:
    """``where:line`` of every ``getattr(x, ...)`` (or ``hasattr``) whose ``x`` is a backend."""
    out = []
    tree = ast.parse(source)
    for fn in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))]:
        typed = (
            {a.arg for a in _params(fn) if _annotation(a.annotation) in BACKEND_TYPES}
            if isinstance(fn, ast.FunctionDef)
            else set()
        )
        for n in ast.walk(fn):
            if (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name)
                and n.func.id in ("getattr", "hasattr")
                and n.args
                and _is_backend(n.args[0], typed)
            ):
                out.append(f"{where}:{n.lineno}")
    return sorted(set(out))


def test_the_getattr_check_finds_a_backend_probed_by_name():
    src = (
        "def f(args, b: 'Backend'):\n"
        "    x = getattr(args, 'server', None)\n"
        "    y = getattr(w.engine, 'url', None)\n"
        "    z = getattr(getattr(b, 'model', None), 'repack', None)\n"
    )
    assert backend_getattrs(src) == [":3", ":4"]


def test_no_backend_is_probed_with_getattr_outside_the_engine():
    """The worker, the app and the command lines read server facts through ``Backend.server``
    and local ones through ``Backend.local``."""
    files = [p for p in sorted(ROOT.rglob("*.py")) if "engine" not in p.relative_to(ROOT).parts]
    found = [
        hit
        for p in files
        for hit in backend_getattrs(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))
    ]
    assert found == []
