"""Find every error code the source gives, by reading it with ``ast`` (never by importing it).

A code reaches an error in three ways: as the first argument (or ``code=``) of a call to an error
class; as the first argument of ``super().__init__`` inside an error class whose own ``__init__``
takes no code; or through a function that forwards its ``code`` parameter into one of those (e.g.
a ``_failure(code, ...)`` helper), whose callers then give the code. A code must be a string literal
or a constant of the registry module (directly, through ``from registry import NAME``, or through a
module-level alias ``NAME = registry.NAME`` / ``NAME = OTHER_ALIAS``, also across the scanned
modules). A local variable counts as every value its function assigns it, and ``exc.code`` of an
error caught by ``except SomeError as exc`` is passed on, not new. Anything else is reported as a
problem, so a code cannot hide in a variable.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

Scope = ast.FunctionDef | ast.AsyncFunctionDef | None


@dataclass(frozen=True, order=True)
class Given:
    """A code given at ``file:line``: its value, or None with ``problem`` saying why it is unknown."""

    file: str
    line: int
    value: str | None
    problem: str = ""


@dataclass
class _Module:
    name: str
    file: str
    tree: ast.Module
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)  # local -> (module, name)
    modules: dict[str, str] = field(default_factory=dict)  # local -> module (``import a.b as c``)
    assigns: dict[str, ast.expr] = field(default_factory=dict)  # module-level NAME = expr


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _read(name: str, file: str, source: str) -> _Module:
    module = _Module(name, file, ast.parse(source, filename=file))
    for node in module.tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                module.imports[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:  # ``import a.b`` binds ``a``; ``import a.b as c`` binds ``c``
                if alias.asname:
                    module.modules[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    module.modules[top] = top
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    module.assigns[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            module.assigns[node.target.id] = node.value
    return module


def _callee(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _base_names(node: ast.ClassDef) -> list[str]:
    return [name for base in node.bases if (name := _callee(base)) is not None]


def _first_param(func: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    params = [*func.args.posonlyargs, *func.args.args]
    if params and params[0].arg in ("self", "cls"):
        params = params[1:]
    return params[0].arg if params else None


def _code_arg(call: ast.Call, index: int | None = 0, keyword_name: str = "code") -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == keyword_name:
            return keyword.value
    if index is not None and len(call.args) > index and not isinstance(call.args[index], ast.Starred):
        return call.args[index]
    return None


def _position(func: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> tuple[int | None, str]:
    """Where a call gives parameter ``name``: its index among the positional ones (None: keyword only)."""
    params = [p.arg for p in (*func.args.posonlyargs, *func.args.args)]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    return (params.index(name) if name in params else None), name


def _default(func: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> ast.expr | None:
    positional = [*func.args.posonlyargs, *func.args.args]
    for param, default in zip(
        positional[len(positional) - len(func.args.defaults) :], func.args.defaults, strict=True
    ):
        if param.arg == name:
            return default
    for param, kw_default in zip(func.args.kwonlyargs, func.args.kw_defaults, strict=True):
        if param.arg == name:
            return kw_default
    return None


def _forwarded(expr: ast.expr, scope: Scope) -> str | None:
    """The parameter name when ``expr`` just passes on one of the enclosing function's parameters."""
    if scope is None or not isinstance(expr, ast.Name):
        return None
    params = {p.arg for p in (*scope.args.posonlyargs, *scope.args.args, *scope.args.kwonlyargs)}
    return expr.id if expr.id in params else None


@dataclass(frozen=True)
class _Site:
    """A place that gives a code: the expression, in the function (None: module level) it is in."""

    module: _Module
    call: ast.Call
    scope: Scope
    expr: ast.expr
    owner: str | None = None  # the class it is written in


class Scan:
    """The codes given in ``sources`` (module name -> (file, text)) to errors descending from ``root``.

    ``registry`` is the module whose constants are codes, with their values.
    """

    def __init__(
        self,
        sources: Mapping[str, tuple[str, str]],
        *,
        root: str,
        registry: str,
        constants: Mapping[str, str],
    ) -> None:
        self.modules = {name: _read(name, file, text) for name, (file, text) in sources.items()}
        self.root = root
        self.registry = registry
        self.constants = constants
        self.classes = self._error_classes()
        self._calls = self._every_call()

    @classmethod
    def of_packages(
        cls, top: Path, packages: Iterable[str], *, root: str, registry: str, constants: Mapping[str, str]
    ) -> Scan:
        sources = {
            _module_name(top, path): (str(path.relative_to(top)), path.read_text(encoding="utf-8"))
            for package in packages
            for path in sorted((top / package).rglob("*.py"))
        }
        return cls(sources, root=root, registry=registry, constants=constants)

    def _error_classes(self) -> dict[str, bool]:
        """Error class name -> whether a call to it takes the code as its first argument."""
        defs: dict[str, ast.ClassDef] = {}
        for module in self.modules.values():
            for node in ast.walk(module.tree):
                if isinstance(node, ast.ClassDef):
                    defs[node.name] = node
        found: dict[str, bool] = {self.root: True}
        changed = True
        while changed:
            changed = False
            for name, node in defs.items():
                if name in found:
                    continue
                bases = [b for b in _base_names(node) if b in found]
                if not bases:
                    continue
                init = next(
                    (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
                )
                found[name] = found[bases[0]] if init is None else _first_param(init) == "code"
                changed = True
        return found

    def given(self) -> list[Given]:
        """Every code given, in file order; those that could not be read carry a problem."""
        sites = [
            _Site(module, call, scope, expr, owner)
            for module, scope, call, owner in self._calls
            if (expr := self._code_of(module, call, owner)) is not None
        ]
        forwarders: dict[str, tuple[int | None, str]] = {}  # function -> where callers give the code
        seen = {id(site.call) for site in sites}
        grew = True
        while grew:  # a function that forwards its ``code`` parameter makes its callers code-givers
            grew = False
            for site in list(sites):
                name = _forwarded(site.expr, site.scope)
                if site.scope is None or name is None or site.scope.name in forwarders | {"__init__": 0}:
                    continue
                forwarders[site.scope.name] = _position(site.scope, name)
                default = _default(site.scope, name)
                if default is not None:  # callers that leave it out give this one
                    sites.append(_Site(site.module, site.call, None, default))
                grew = True
            for module, scope, call, _owner in self._calls:
                where = forwarders.get(_callee(call.func) or "")
                expr = _code_arg(call, *where) if where is not None else None
                if expr is not None and id(call) not in seen:
                    seen.add(id(call))
                    sites.append(_Site(module, call, scope, expr))
                    grew = True
        out: list[Given] = []
        for site in sites:
            forwarded = _forwarded(site.expr, site.scope)
            if forwarded is None:
                out.extend(self._values(site))
            elif (
                site.scope is not None
                and site.scope.name == "__init__"
                and not self.classes.get(site.owner or "")
            ):
                # an error whose __init__ takes the code, but not first: its callers would go unread
                why = f"code given as {forwarded!r}: {site.owner}.__init__ must take it first, as `code`"
                out.append(Given(site.module.file, site.call.lineno, None, why))
            # else its callers are sites of their own
        return sorted(out)

    def _every_call(self) -> list[tuple[_Module, Scope, ast.Call, str | None]]:
        """Each call in the sources, with the function and the class it is written in."""

        def walk(
            node: ast.AST, scope: Scope, owner: str | None
        ) -> Iterator[tuple[Scope, ast.Call, str | None]]:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    yield from walk(child, scope, child.name)
                    continue
                inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else scope
                if isinstance(child, ast.Call):
                    yield inner, child, owner
                yield from walk(child, inner, owner)

        return [
            (m, scope, call, owner)
            for m in self.modules.values()
            for scope, call, owner in walk(m.tree, None, None)
        ]

    def _code_of(self, module: _Module, call: ast.Call, owner: str | None) -> ast.expr | None:
        """The code argument when ``call`` makes an error (or is an error's ``super().__init__``)."""
        callee = _callee(call.func)
        if isinstance(call.func, ast.Name) and callee in module.imports:
            callee = module.imports[callee][1]  # ``from baton.errors import BatonError as Oops``
        if callee in self.classes:
            return _code_arg(call) if self.classes[callee] else None
        is_super_init = (
            isinstance(call.func, ast.Attribute)
            and call.func.attr == "__init__"
            and isinstance(call.func.value, ast.Call)
            and _callee(call.func.value.func) == "super"
        )
        if is_super_init and owner in self.classes and owner != self.root:
            return _code_arg(call)
        return None

    def _values(self, site: _Site) -> list[Given]:
        """The code(s) a site gives: a local variable gives each value its function assigns it."""
        module, line, expr, scope = site.module, site.call.lineno, site.expr, site.scope
        if self._passed_on(expr, scope):
            return []  # the caught error's code: that error's own raise site was scanned
        if isinstance(expr, ast.Name) and scope is not None:
            assigned = [
                node.value
                for node in ast.walk(scope)
                if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == expr.id for t in node.targets)
            ]
            if assigned:
                return [self._value(module, line, value) for value in assigned]
        return [self._value(module, line, expr)]

    def _passed_on(self, expr: ast.expr, scope: Scope) -> bool:
        """Whether ``expr`` is ``exc.code`` of an error of this family caught by ``except ... as exc``."""
        if scope is None or not isinstance(expr, ast.Attribute) or expr.attr != "code":
            return False
        if not isinstance(expr.value, ast.Name):
            return False
        for node in ast.walk(scope):
            if isinstance(node, ast.ExceptHandler) and node.name == expr.value.id and node.type is not None:
                caught = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
                return all(_callee(c) in self.classes for c in caught)
        return False

    def _value(self, module: _Module, line: int, expr: ast.expr) -> Given:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return Given(module.file, line, expr.value)
        constant = self._constant(module, expr, depth=0)
        if constant is None:
            return Given(module.file, line, None, f"code given as {ast.unparse(expr)!r}: not a literal "
                                                  f"nor a constant of {self.registry}")  # fmt: skip
        return Given(module.file, line, self.constants[constant])

    def _constant(self, module: _Module, expr: ast.expr, depth: int) -> str | None:
        """The registry constant ``expr`` names, following imports and module-level aliases."""
        if depth > 10:
            return None
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            target = module.imports.get(expr.value.id)
            target_module = ".".join(target) if target else module.modules.get(expr.value.id)
            if target_module == self.registry:
                return expr.attr if expr.attr in self.constants else None
            if target_module in self.modules:
                return self._name(self.modules[target_module], expr.attr, depth + 1)
            return None
        if isinstance(expr, ast.Name):
            return self._name(module, expr.id, depth + 1)
        return None

    def _name(self, module: _Module, name: str, depth: int) -> str | None:
        if module.name == self.registry:
            return name if name in self.constants else None
        if name in module.imports:
            source, original = module.imports[name]
            if source == self.registry:
                return original if original in self.constants else None
            if source in self.modules:
                return self._name(self.modules[source], original, depth + 1)
            return None
        if name in module.assigns:
            value = module.assigns[name]
            if isinstance(value, ast.Constant):
                return None  # a literal behind a name: make it a registry constant
            return self._constant(module, value, depth)
        return None
