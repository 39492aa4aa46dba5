#!/usr/bin/env python3
"""Writes type stubs (.pyi) for a pybind11 extension module by importing it and reading what it holds.

A build-time tool (not shipped in the package): the build runs it after linking gpumem._gpumem, so the
stubs always describe the module that was just built::

    PYTHONPATH=<build>/python GPUMEM_BACKEND=host python3 python/tools/generate_stubs.py \
        --module gpumem._gpumem --output-dir <build>/python/gpumem

writes <output-dir>/_gpumem/__init__.pyi, and <output-dir>/_gpumem/<sub>.pyi for each submodule (a
submodule that has submodules of its own becomes <sub>/__init__.pyi). That stub-only directory next to
the extension is what type checkers read for gpumem._gpumem; the import system ignores it (a directory
without __init__.py loses to the extension file of the same name). Stale .pyi files in it are removed.
``--check`` writes nothing and exits 1 when the files on disk differ from what would be written.

How it reads the module (nothing here names a class of gpumem; whatever the module holds is stubbed):
- pybind11 writes each function's signature as the first line of its docstring,
  ``name(arg0: type, x: type = default) -> type``, and for overloads "Overloaded function." followed by
  "1. name(...) -> ..." blocks. These become ``def`` lines (``@typing.overload`` for overloads); the text
  after the signature becomes the stub's docstring.
- Type names pybind11 prints that are not valid Python are mapped (``handle`` -> typing.Any,
  ``numpy.ndarray[numpy.float32]`` -> numpy.ndarray, ``function`` -> typing.Callable[..., typing.Any],
  ``List[int]`` -> typing.List[int], ``gpumem._gpumem.cuda.Stream`` -> Stream inside its own module);
  what cannot be mapped (C++ names like ``gpumem::mr::x``, ``capsule``, ``buffer``, unknown names) becomes
  typing.Any with a comment on that line saying what it stood for. Default values that are not plain
  literals (``<gpumem._gpumem.X object at 0x...>``) become ``...``.
- Classes: methods, static and class methods, properties (read-only or with a setter), enum members
  (pybind11's py::enum_ and enum.Enum-based enums), nested classes, class attributes; NamedTuple-like
  classes become ``typing.NamedTuple`` subclasses. Submodules get their own stub files.

The output is deterministic (no addresses, times or set orders): the same module gives byte-identical files.

Why not mypy's stubgen (Debian 12's python3-mypy, mypy 1.0) on the built module: its stubs of gpumem._gpumem
have no docstrings; two of its three files do not parse (a property's prose docstring is taken for its
signature: ``def state(self) -> Which copy is current: ...``); a docstring's text becomes a phantom overload
(``def copy(self, sameresource) -> Any``); pybind11's ``handle``, ``capsule`` and ``buffer`` are left as
undefined names; keyword-only parameters lose the whole signature (``DeviceBuffer.__init__(*args,
**kwargs)``), static methods become instance methods, and every default is ``...``. This tool needs only
the standard library, so the stubs are generated wherever the module is built, a GPU machine included.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import enum
import importlib
import inspect
import keyword
import os
import re
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

ANY = "typing.Any"

# ---- type expressions ------------------------------------------------------------------------------------

# pybind11's names for Python types that are not themselves valid annotations: name -> (annotation, note).
# A note means the annotation is a fallback; it is written as a comment on the line that uses it.
PYBIND11_NAMES: Dict[str, Tuple[str, Optional[str]]] = {
    "handle": (ANY, None),  # py::handle: any object
    "capsule": (ANY, "capsule (a PyCapsule, no annotation before Python 3.13)"),
    "buffer": (ANY, "buffer (any object with the buffer protocol; collections.abc.Buffer from Python 3.12)"),
    "function": ("typing.Callable[..., typing.Any]", None),
    "cpp_function": ("typing.Callable[..., typing.Any]", None),
    "iterable": ("typing.Iterable[typing.Any]", None),
    "iterator": ("typing.Iterator[typing.Any]", None),
    "sequence": ("typing.Sequence[typing.Any]", None),
    "none": ("None", None),
    "NoneType": ("None", None),
    "args": ("tuple", None),
    "kwargs": ("dict", None),
    "module": ("types.ModuleType", None),
    "dtype": ("numpy.dtype", None),
    "array": ("numpy.ndarray", None),
}
# typing's generics as pybind11 2.x prints them (bare); pybind11 3.x prints them qualified, which passes as is.
TYPING_NAMES = frozenset({
    "Annotated", "Any", "Callable", "ClassVar", "Dict", "FrozenSet", "Generator", "Iterable", "Iterator",
    "List", "Literal", "Mapping", "Optional", "Sequence", "Set", "Tuple", "Type", "Union",
})
# Annotations whose subscripts pybind11 prints in a form Python cannot parse (numpy.ndarray[numpy.float32[3, 3]]).
DROP_SUBSCRIPT = frozenset({"numpy.ndarray"})
BUILTIN_TYPES = frozenset(name for name, value in vars(builtins).items() if isinstance(value, type))
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")

_TOKEN = re.compile(r"""\s*(?:(?P<ellipsis>\.\.\.)|(?P<name>[A-Za-z_][\w.]*)|(?P<punct>[\[\],|])"""
                    r"""|(?P<literal>'[^']*'|"[^"]*"|-?\d+(?:\.\d+)?))""")


class UnparsableType(ValueError):
    """A type string that is not a Python-like type expression (a C++ name, say)."""


@dataclass
class TypeNode:
    """One parsed type expression: kind is "name" (text, args or None), "list" (args), "literal" (text),
    "ellipsis" or "union" (args)."""

    kind: str
    text: str = ""
    args: Optional[List["TypeNode"]] = None


def parse_type(text: str) -> TypeNode:
    """Parses pybind11's printed type `text`. @throws UnparsableType if it is not a Python-like expression."""
    tokens: List[Tuple[str, str]] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise UnparsableType(text)
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind)))
        position = match.end()
    tokens.append(("end", ""))
    index = 0

    def peek() -> Tuple[str, str]:
        return tokens[index]

    def take(expected: Optional[str] = None) -> Tuple[str, str]:
        nonlocal index
        token = tokens[index]
        if expected is not None and token[1] != expected:
            raise UnparsableType(text)
        index += 1
        return token

    def items(closing: str) -> List[TypeNode]:
        found: List[TypeNode] = []
        if peek()[1] == closing:
            return found
        found.append(union())
        while peek()[1] == ",":
            take(",")
            found.append(union())
        return found

    def atom() -> TypeNode:
        kind, value = take()
        if kind == "name":
            if peek()[1] == "[":
                take("[")
                args = items("]")
                take("]")
                return TypeNode("name", value, args)
            return TypeNode("name", value)
        if kind == "punct" and value == "[":
            args = items("]")
            take("]")
            return TypeNode("list", args=args)
        if kind == "literal":
            return TypeNode("literal", value)
        if kind == "ellipsis":
            return TypeNode("ellipsis", "...")
        raise UnparsableType(text)

    def union() -> TypeNode:
        first = atom()
        if peek()[1] != "|":
            return first
        members = [first]
        while peek()[1] == "|":
            take("|")
            members.append(atom())
        return TypeNode("union", args=members)

    node = union()
    if peek()[0] != "end":
        raise UnparsableType(text)
    return node


# ---- the extension's classes -----------------------------------------------------------------------------


@dataclass
class ExtensionIndex:
    """Where each class of the extension is defined: the stub module and the qualified name in it."""

    root: types.ModuleType
    modules: List[types.ModuleType]
    by_id: Dict[int, Tuple[str, str]] = field(default_factory=dict)
    by_name: Dict[str, Tuple[str, str]] = field(default_factory=dict)

    def locate(self, cls: type) -> Optional[Tuple[str, str]]:
        return self.by_id.get(id(cls))


def submodules(module: types.ModuleType) -> List[types.ModuleType]:
    """The modules defined inside `module` (pybind11's def_submodule), in definition order."""
    return [value for name, value in vars(module).items()
            if isinstance(value, types.ModuleType) and value.__name__ == f"{module.__name__}.{name}"]


def all_modules(root: types.ModuleType) -> List[types.ModuleType]:
    found = [root]
    for child in submodules(root):
        found.extend(all_modules(child))
    return found


def is_ours(cls: type, root: types.ModuleType) -> bool:
    """Whether `cls` belongs to the extension's package (the pure-Python package re-exports the extension,
    never the other way round, so a class found in the extension whose __module__ names the package, e.g.
    a namedtuple made with module="gpumem.mr", is defined by the extension)."""
    package = root.__name__.split(".")[0]
    module_name = getattr(cls, "__module__", "") or ""
    return module_name == package or module_name.startswith(package + ".")


def index_extension(root: types.ModuleType) -> ExtensionIndex:
    """Finds every class the extension defines and the one place its stub is written."""
    index = ExtensionIndex(root, all_modules(root))
    candidates: Dict[int, List[Tuple[str, str, type]]] = {}
    for module in index.modules:
        for name, value in vars(module).items():
            if inspect.isclass(value) and value.__name__ == name and is_ours(value, root):
                candidates.setdefault(id(value), []).append((module.__name__, name, value))

    def add(module_name: str, qualname: str, cls: type) -> None:
        index.by_id[id(cls)] = (module_name, qualname)
        index.by_name.setdefault(f"{module_name}.{qualname}", (module_name, qualname))
        index.by_name.setdefault(f"{cls.__module__}.{cls.__qualname__}", (module_name, qualname))
        for name, value in vars(cls).items():
            if inspect.isclass(value) and value.__qualname__ == f"{cls.__qualname__}.{name}":
                add(module_name, f"{qualname}.{name}", value)

    for found in candidates.values():
        preferred = [c for c in found if c[0] == c[2].__module__]
        module_name, name, cls = (preferred or found)[0]
        add(module_name, name, cls)
    return index


# ---- rendering annotations -------------------------------------------------------------------------------


class Scope:
    """What one stub file needs while it is written: its module, its imports, the fallback notes of the
    line being written, and the names that shadow builtins in the class bodies being written."""

    def __init__(self, index: ExtensionIndex, module: types.ModuleType):
        self.index = index
        self.module = module
        self.imports: set = set()
        self.relative_imports: List[str] = []
        self.notes: List[str] = []
        self.shadowed: List[frozenset] = [frozenset(vars(module))]

    # -- notes of the current line
    def take_notes(self) -> str:
        """The comment for the line being finished: what it could not write as the module has it."""
        notes = sorted(set(self.notes))
        self.notes = []
        return f"  # {'; '.join(notes)}" if notes else ""

    def fallback(self, what: str) -> str:
        """typing.Any in place of `what`, noted for the line's comment."""
        self.notes.append(f"typing.Any for {what}")
        return self.use("typing.Any")

    # -- names
    def use(self, expression: str) -> str:
        """`expression` (typing.Callable[..., typing.Any], say), importing the modules it names."""
        for dotted in _DOTTED.findall(expression):
            module_name = self._module_prefix(dotted)
            if module_name and module_name != "builtins":
                self.imports.add(module_name)
        return expression

    @staticmethod
    def _module_prefix(dotted: str) -> str:
        """The longest prefix of `dotted` that is an importable module ("" if none), imported."""
        parts = dotted.split(".")
        for end in range(len(parts) - 1, 0, -1):
            candidate = ".".join(parts[:end])
            if candidate not in sys.modules:
                try:  # a module a signature names (numpy.typing, say) that nothing imported yet
                    importlib.import_module(candidate)
                except Exception:  # noqa: BLE001: not importable here, whatever the reason
                    continue
            return candidate
        return ""

    def builtin(self, name: str) -> str:
        """A builtin's name; builtins.<name> where a class or module entry of that name shadows it."""
        if name != "None" and any(name in names for names in self.shadowed):
            self.imports.add("builtins")
            return f"builtins.{name}"
        return name

    def extension_class(self, module_name: str, qualname: str) -> str:
        if module_name == self.module.__name__:
            return qualname
        self.imports.add(module_name)
        return f"{module_name}.{qualname}"

    # -- annotations from pybind11's text
    def annotation(self, text: Optional[str]) -> str:
        """A valid annotation for pybind11's printed type `text`."""
        if text is None:
            return ""
        text = text.strip()
        if "::" in text or "<" in text:
            return self.fallback(f"{text} (a C++ type not bound to Python)")
        try:
            node = parse_type(text)
        except UnparsableType:
            return self.fallback(f"{text} (not a Python type expression)")
        rendered = self._render(node)
        try:
            ast.parse(rendered, mode="eval")
        except SyntaxError:
            return self.fallback(f"{text} (not a Python type expression)")
        return rendered

    def _render(self, node: TypeNode) -> str:
        if node.kind in ("literal", "ellipsis"):
            return node.text
        if node.kind == "list":
            return "[" + ", ".join(self._render(arg) for arg in node.args or []) + "]"
        if node.kind == "union":
            return " | ".join(self._render(arg) for arg in node.args or [])
        name, args = node.text, node.args
        base = self._name(name)
        if base == ANY and name != "typing.Any" and name != "Any":
            return base  # a fallback: its subscripts mean nothing any more
        if args is None or base in DROP_SUBSCRIPT:
            return base
        if "[" in base:  # an alias that is already subscripted (function -> typing.Callable[..., typing.Any])
            return base
        return f"{base}[{', '.join(self._render(arg) for arg in args)}]"

    def _name(self, name: str) -> str:
        if name in PYBIND11_NAMES:
            annotation, note = PYBIND11_NAMES[name]
            if note:
                return self.fallback(note)
            return self.use(annotation) if "." in annotation else self.builtin(annotation)
        if name in TYPING_NAMES:
            return self.use(f"typing.{name}")
        if name in BUILTIN_TYPES or name == "None":
            return self.builtin(name)
        if name in self.index.by_name:
            return self.extension_class(*self.index.by_name[name])
        if "." in name:
            module_name = self._module_prefix(name)
            if module_name:
                target = sys.modules[module_name]
                for part in name[len(module_name) + 1:].split("."):
                    target = getattr(target, part, None)
                    if target is None:
                        break
                if target is not None:
                    if inspect.isclass(target) and self.index.locate(target):
                        return self.extension_class(*self.index.locate(target))
                    return self.use(name)
        elif name in vars(self.module):  # an unqualified name of this module
            return name
        return self.fallback(f"{name} (unknown type)")

    # -- annotations from Python objects
    def type_object(self, cls: object) -> str:
        """A valid annotation for the class `cls` (or None)."""
        if cls is None or cls is type(None):
            return "None"
        if not inspect.isclass(cls):
            return self.annotation(str(cls))
        located = self.index.locate(cls)
        if located:
            return self.extension_class(*located)
        module_name, qualname = cls.__module__, cls.__qualname__
        if module_name == "builtins":
            return self.builtin(qualname)
        if "<" in qualname or module_name not in sys.modules or module_name.startswith("pybind11_"):
            return self.fallback(f"{module_name}.{qualname} (not importable)")
        self.imports.add(module_name)
        return f"{module_name}.{qualname}"

    def python_annotation(self, annotation: object) -> str:
        """A valid annotation for a Python function's annotation object."""
        if annotation is inspect.Parameter.empty:
            return ""
        if isinstance(annotation, str):
            return self.annotation(annotation)
        if inspect.isclass(annotation):
            return self.type_object(annotation)
        return self.annotation(str(annotation))


# ---- signatures from pybind11's docstrings ---------------------------------------------------------------

_SIGNATURE = re.compile(r"^(?P<name>[\w.]*)\((?P<params>.*)\)(\s*->\s*(?P<returns>.+?))?\s*$")
_OVERLOAD = re.compile(r"^(?P<number>\d+)\.\s+(?P<signature>[\w.]*\(.*\)\s*->\s*.+)$")
OVERLOADED = "Overloaded function."


@dataclass
class Param:
    """One parameter as pybind11 printed it: kind is "normal", "star" (*args), "double_star" (**kwargs) or
    "marker" (a bare * or /)."""

    name: str
    annotation: Optional[str] = None
    default: Optional[str] = None
    kind: str = "normal"


@dataclass
class Signature:
    """One pybind11 signature and the docstring text that follows it."""

    name: str
    params: List[Param]
    returns: str
    text: str
    doc: str = ""


def split_top_level(text: str, separator: str) -> List[str]:
    """`text` split at `separator` (one character) outside brackets and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for position, char in enumerate(text):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{<":
            depth += 1
        elif char in ")]}>" and depth > 0 and not (char == ">" and text[position - 1] == "-"):
            depth -= 1
        elif char == separator and depth == 0:
            parts.append(text[start:position])
            start = position + 1
    parts.append(text[start:])
    return parts


def parse_params(text: str) -> List[Param]:
    params: List[Param] = []
    for raw in split_top_level(text, ","):
        raw = raw.strip()
        if not raw:
            continue
        if raw in ("*", "/"):
            params.append(Param(raw, kind="marker"))
            continue
        pieces = split_top_level(raw, "=")
        declaration = pieces[0].strip()
        default = "=".join(pieces[1:]).strip() if len(pieces) > 1 else None
        name, _, annotation = declaration.partition(":")
        kind = "normal"
        if name.startswith("**"):
            kind, name = "double_star", name[2:]
        elif name.startswith("*"):
            kind, name = "star", name[1:]
        params.append(Param(name.strip(), annotation.strip() or None, default, kind))
    return params


def parse_signature(line: str, overloaded: bool = False) -> Optional[Signature]:
    """The signature on `line`, or None. Only an overloaded function's first line may lack `-> type`."""
    match = _SIGNATURE.match(line.strip())
    if match is None or (match["returns"] is None and not overloaded):
        return None
    return Signature(match["name"], parse_params(match["params"]), match["returns"] or "", line.strip())


def parse_docstring(doc: Optional[str]) -> Tuple[List[Signature], str]:
    """pybind11's docstring -> (its signatures, one per overload; the text that is not a signature).
    No signatures when the first line is not one (a Python function, or a class's docstring)."""
    if not doc:
        return [], ""
    lines = doc.split("\n")
    rest = lines[1:]
    overloaded = bool(rest) and rest[0].strip() == OVERLOADED
    first = parse_signature(lines[0], overloaded)
    if first is None:
        return [], doc.strip()
    if not overloaded:
        first.doc = "\n".join(rest).strip()
        return [first], first.doc
    overloads: List[Signature] = []
    for line in rest[1:]:
        match = _OVERLOAD.match(line)
        signature = parse_signature(match["signature"]) if match else None
        if signature is not None and signature.name == first.name:
            overloads.append(signature)
        elif overloads:
            overloads[-1].doc += line + "\n"
    for overload in overloads:
        overload.doc = overload.doc.strip()
    if not overloads:  # "Overloaded function." with no numbered signatures: nothing to go on
        return [], "\n".join(rest[1:]).strip()
    return overloads, "\n\n".join(o.doc for o in overloads if o.doc)


# ---- writing stub text -----------------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def docstring_lines(text: str, indent: str) -> List[str]:
    """`text` as a triple-quoted docstring at `indent` (continuation lines indented; quotes escaped)."""
    text = inspect.cleandoc(text)
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    if text.endswith('"'):
        text = text[:-1] + '\\"'
    lines = text.split("\n")
    if len(lines) == 1:
        return [f'{indent}"""{text}"""']
    out = [f'{indent}"""{lines[0]}']
    out += [f"{indent}{line}" if line.strip() else "" for line in lines[1:]]
    out.append(f'{indent}"""')
    return out


def literal_default(text: Optional[str]) -> Optional[str]:
    """A default value as the stub writes it: simple literals as printed, anything else as `...`."""
    if text is None:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return "..."
    if isinstance(value, (bool, int, float)) or value is None or (isinstance(value, str) and len(text) <= 60):
        return text
    return "..."


def parameter_name(name: str, position: int) -> str:
    if not name:
        return f"arg{position}"
    if keyword.iskeyword(name) or not name.isidentifier():
        return f"{re.sub(r'[^0-9A-Za-z_]', '_', name)}_"
    return name


# object's methods that bindings commonly define again, and the return type typeshed gives them: a binding
# whose signature differs (pybind11's __eq__ returns object, to allow NotImplemented) is an incompatible
# override for a type checker, which the stub marks as intended.
OBJECT_METHODS = {"__eq__": "bool", "__ne__": "bool", "__hash__": "int", "__repr__": "str", "__str__": "str",
                  "__format__": "str", "__sizeof__": "int"}


def override_comment(head: str) -> str:
    """`  # type: ignore[override]` when `head` redefines one of object's methods with another signature."""
    function = ast.parse(f"{head}: ...").body[0]
    assert isinstance(function, ast.FunctionDef)
    expected = OBJECT_METHODS.get(function.name)
    if expected is None:
        return ""
    returns = ast.unparse(function.returns) if function.returns else ""
    args = function.args
    annotations = [ast.unparse(a.annotation) for a in args.args[1:] if a.annotation is not None]
    compatible = returns == expected and all(a == "object" for a in annotations) and not args.kwonlyargs
    if function.name in ("__eq__", "__ne__"):
        compatible = compatible and len(args.args) == 2 and len(annotations) == 1
    return "" if compatible else "  # type: ignore[override]"


def def_block(scope: Scope, indent: str, decorators: Sequence[str], head: str, doc: str) -> List[str]:
    """A `def` (or property) with `decorators`, the signature `head`, and its docstring or `...` as body."""
    lines = [f"{indent}{decorator}" for decorator in decorators]
    notes = (override_comment(head) if indent else "") + scope.take_notes()  # type: ignore must come first
    if doc:
        lines.append(f"{indent}{head}:{notes}")
        lines += docstring_lines(doc, indent + "    ")
    else:
        lines.append(f"{indent}{head}: ...{notes}")
    return lines


def signature_head(scope: Scope, name: str, signature: Signature, kind: str) -> str:
    """`def name(...) -> type` for a pybind11 `signature`; kind: "function", "method", "static", "class"."""
    params = list(signature.params)
    rendered: List[str] = []
    if kind in ("method", "class"):
        rendered.append("self" if kind == "method" else "cls")
        if params and params[0].kind == "normal":
            params = params[1:]
    for position, param in enumerate(params):
        if param.kind == "marker":
            rendered.append(param.name)
            continue
        prefix = {"star": "*", "double_star": "**"}.get(param.kind, "")
        text = prefix + parameter_name(param.name, position)
        if param.name and text != prefix + param.name:
            scope.notes.append(f"{text.lstrip('*')} is the parameter {param.name!r}, not a Python name")
        if param.annotation:
            annotation = scope.annotation(param.annotation)
        else:  # pybind11 prints py::args and py::kwargs bare: any objects
            annotation = scope.use(ANY) if prefix else ""
        if annotation:
            text += f": {annotation}"
        default = literal_default(param.default)
        if default is not None:
            text += f" = {default}" if annotation else f"={default}"
        rendered.append(text)
    returns = "None" if name == "__init__" else scope.annotation(signature.returns)
    head = f"def {name}({', '.join(rendered)}) -> {returns}"
    try:
        ast.parse(f"{head}: ...")
    except SyntaxError:
        scope.notes = [f"pybind11's signature is not valid Python: {signature.text}"]
        head = f"def {name}(*args: typing.Any, **kwargs: typing.Any) -> {ANY}"
        scope.imports.add("typing")
    return head


def python_head(scope: Scope, name: str, function: object, kind: str) -> str:
    """`def name(...) -> type` from inspect.signature: a Python function's, or a C function's
    __text_signature__ (a method written against the C API; its parameters carry no types)."""
    self_name = {"method": "self", "class": "cls"}.get(kind)
    try:
        signature = inspect.signature(function)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        scope.notes.append("no signature in its docstring")
        scope.imports.add("typing")
        first = f"{self_name}, " if self_name else ""
        return f"def {name}({first}*args: typing.Any, **kwargs: typing.Any) -> {ANY}"
    rendered: List[str] = []
    parameters = list(signature.parameters)
    if self_name and not inspect.isfunction(function) and (not parameters or parameters[0] != self_name):
        rendered.append(self_name)  # a C method's text signature without $self
    seen_keyword_only = False
    previous = None
    for param in signature.parameters.values():
        if param.kind == param.KEYWORD_ONLY and not seen_keyword_only:
            seen_keyword_only = True
            if previous != param.VAR_POSITIONAL:
                rendered.append("*")
        if previous == param.POSITIONAL_ONLY and param.kind != param.POSITIONAL_ONLY:
            rendered.append("/")
        prefix = {param.VAR_POSITIONAL: "*", param.VAR_KEYWORD: "**"}.get(param.kind, "")
        text = prefix + param.name
        annotation = scope.python_annotation(param.annotation)
        if annotation:
            text += f": {annotation}"
        if param.default is not param.empty:
            default = literal_default(repr(param.default))
            text += f" = {default}" if annotation else f"={default}"
        rendered.append(text)
        previous = param.kind
    if previous == inspect.Parameter.POSITIONAL_ONLY:
        rendered.append("/")
    returns = scope.python_annotation(signature.return_annotation)
    if not returns:
        returns = scope.use(ANY) if inspect.isfunction(function) else scope.fallback("the result (a C function)")
    head = f"def {name}({', '.join(rendered)}) -> {returns}"
    try:
        ast.parse(f"{head}: ...")
    except SyntaxError:
        scope.notes = [f"the signature is not valid Python: {signature}"]
        scope.imports.add("typing")
        head = f"def {name}(*args: typing.Any, **kwargs: typing.Any) -> {ANY}"
    return head


# ---- modules and classes ---------------------------------------------------------------------------------

# Entries that describe the object rather than its API (or are pybind11's internals).
SKIP_MODULE = frozenset({"__builtins__", "__cached__", "__doc__", "__file__", "__loader__", "__name__",
                         "__package__", "__path__", "__spec__"})
SKIP_CLASS = frozenset({"__dict__", "__doc__", "__module__", "__qualname__", "__weakref__", "__slots__",
                        "__annotations__", "__firstlineno__", "__static_attributes__", "__orig_bases__",
                        "__entries", "__match_args__", "__parameters__"})
# The type's slots (tp_init as __init__, say): there whether or not the bindings define them.
SLOT_WRAPPERS = (types.WrapperDescriptorType, types.MethodWrapperType)


def skipped_class_entry(name: str) -> bool:
    mangled = name.startswith("__") and not name.endswith("__")
    return name in SKIP_CLASS or mangled or name.startswith("_pybind11")


def function_blocks(scope: Scope, indent: str, name: str, function: object, kind: str) -> List[List[str]]:
    """The stub of a function or method: one block, or one per overload. `function` is the callable itself
    (a staticmethod's __func__, say); kind: "function", "method", "static", "class"."""
    decorators = {"static": ["@staticmethod"], "class": ["@classmethod"]}.get(kind, [])
    signatures, text = parse_docstring(getattr(function, "__doc__", None))
    if not signatures:  # a Python function, or a C function (its __text_signature__, if any)
        return [def_block(scope, indent, decorators, python_head(scope, name, function, kind), text)]
    if len(signatures) == 1:
        return [def_block(scope, indent, decorators, signature_head(scope, name, signatures[0], kind), text)]
    scope.imports.add("typing")
    return [def_block(scope, indent, ["@typing.overload"] + decorators,
                      signature_head(scope, name, signature, kind), signature.doc)
            for signature in signatures]


def property_blocks(scope: Scope, indent: str, name: str, prop: property) -> List[List[str]]:
    doc = prop.__doc__ or ""
    getter_signatures, getter_text = parse_docstring(getattr(prop.fget, "__doc__", None))
    if doc.strip() == (getattr(prop.fget, "__doc__", None) or "").strip():
        doc = getter_text  # pybind11 without a doc of its own: the getter's, minus its signature
    if getter_signatures:
        returns = scope.annotation(getter_signatures[0].returns)
    elif inspect.isfunction(prop.fget):
        returns = scope.python_annotation(inspect.signature(prop.fget).return_annotation) or scope.use(ANY)
    else:
        returns = scope.use(ANY)
    blocks = [def_block(scope, indent, ["@property"], f"def {name}(self) -> {returns}", parse_docstring(doc)[1])]
    if prop.fset is not None:
        setter_signatures, _ = parse_docstring(getattr(prop.fset, "__doc__", None))
        value = returns
        if setter_signatures and len(setter_signatures[0].params) >= 2:
            value = scope.annotation(setter_signatures[0].params[1].annotation) or returns
        blocks.append(def_block(scope, indent, [f"@{name}.setter"], f"def {name}(self, value: {value}) -> None", ""))
    return blocks


def attribute_line(scope: Scope, indent: str, name: str, value: object, in_class: bool) -> List[str]:
    annotation = scope.type_object(type(value))
    if in_class:
        annotation = f"{scope.use('typing.ClassVar')}[{annotation}]"
    comment = scope.take_notes()
    if in_class and value is None and hasattr(object, name):  # __hash__ = None, say: as typeshed writes it
        comment = "  # type: ignore[assignment]" + comment
    return [f"{indent}{name}: {annotation}{comment}"]


def alias_line(scope: Scope, indent: str, name: str, cls: type) -> List[str]:
    target = scope.type_object(cls)
    comment = scope.take_notes()
    if target == ANY:
        return [f"{indent}{name}: {scope.use('typing.Any')}{comment}"]
    return [f"{indent}{name} = {target}{comment}"]


def class_header(scope: Scope, indent: str, name: str, cls: type) -> str:
    bases = [base for base in cls.__bases__
             if base is not object and not base.__module__.startswith("pybind11_")]
    rendered = [scope.type_object(base) for base in bases]
    comment = scope.take_notes()
    return f"{indent}class {name}({', '.join(rendered)}):{comment}" if rendered else f"{indent}class {name}:{comment}"


def is_pybind11_enum(cls: type) -> bool:
    return "__members__" in vars(cls) and "__entries" in vars(cls)


def class_block(scope: Scope, indent: str, name: str, cls: type) -> List[str]:
    """The stub of class `cls`: docstring, enum members, methods, properties, attributes, nested classes."""
    inner = indent + "    "
    entries = vars(cls)
    scope.shadowed.append(frozenset(entries))
    try:
        blocks: List[List[str]] = []
        fields = entries.get("_fields")
        if issubclass(cls, tuple) and isinstance(fields, tuple):  # a namedtuple: its fields are its API
            header = f"{indent}class {name}({scope.use('typing.NamedTuple')}):"
            annotations = getattr(cls, "__annotations__", {}) or {}
            for field_name in fields:
                if field_name in annotations:
                    annotation = scope.python_annotation(annotations[field_name])
                else:
                    annotation = scope.fallback("a namedtuple field (namedtuple records no types)")
                blocks.append([f"{inner}{field_name}: {annotation}{scope.take_notes()}"])
            return assemble_class(header, cls, inner, blocks)
        if isinstance(cls, enum.EnumMeta):  # an enum.Enum (pybind11 3's py::native_enum): its members
            header = class_header(scope, indent, name, cls)
            for member_name, member in cls.__members__.items():
                value = literal_default(repr(member.value))
                blocks.append([f"{inner}{member_name} = {value}"])
            return assemble_class(header, cls, inner, blocks)
        header = class_header(scope, indent, name, cls)
        members: Dict[str, object] = {}
        if is_pybind11_enum(cls):
            members = dict(cls.__members__)  # type: ignore[attr-defined]
            own_type = scope.type_object(cls)  # qualified: a nested enum's name is not in scope in its body
            for member_name, member in members.items():
                blocks.append([f"{inner}{member_name}: {scope.use('typing.ClassVar')}[{own_type}]"
                               f"  # value = {int(member)}"])  # type: ignore[call-overload]
        for entry_name, value in entries.items():
            if skipped_class_entry(entry_name) or entry_name in members:
                continue
            blocks.extend(member_blocks(scope, inner, cls, entry_name, value))
        return assemble_class(header, cls, inner, blocks)
    finally:
        scope.shadowed.pop()


def member_blocks(scope: Scope, indent: str, cls: type, name: str, value: object) -> List[List[str]]:
    """The stub of one entry of a class's __dict__."""
    if isinstance(value, staticmethod):
        return function_blocks(scope, indent, name, value.__func__, "static")
    if isinstance(value, (classmethod, types.ClassMethodDescriptorType)):
        return function_blocks(scope, indent, name, getattr(value, "__func__", value), "class")
    if type(value).__name__ == "instancemethod" or isinstance(value, (types.FunctionType, types.MethodDescriptorType)):
        return function_blocks(scope, indent, name, value, "method")  # pybind11's, Python's, or the C API's
    if isinstance(value, (types.GetSetDescriptorType, types.MemberDescriptorType)):  # C API attributes
        annotation = scope.fallback(f"{name} (an attribute written against the C API)")
        doc = [docstring_lines(value.__doc__, indent)] if value.__doc__ else []
        return [[f"{indent}{name}: {annotation}{scope.take_notes()}"] + sum(doc, [])]
    if isinstance(value, property):
        if "static" in type(value).__name__:  # pybind11's def_property_static: a class attribute
            signatures, _ = parse_docstring(getattr(value.fget, "__doc__", None))
            annotation = scope.annotation(signatures[0].returns) if signatures else scope.use(ANY)
            return [[f"{indent}{name}: {scope.use('typing.ClassVar')}[{annotation}]{scope.take_notes()}"]]
        return property_blocks(scope, indent, name, value)
    if isinstance(value, SLOT_WRAPPERS):
        return []  # from the C type, not from the bindings (object's __init__, say)
    if inspect.isbuiltin(value):  # a function stored in the class: not bound, so static unless it takes self
        signatures, _ = parse_docstring(value.__doc__)
        takes_self = bool(signatures and signatures[0].params and signatures[0].params[0].name == "self")
        return function_blocks(scope, indent, name, value, "method" if takes_self else "static")
    if inspect.isclass(value):
        if value.__qualname__ == f"{cls.__qualname__}.{name}":
            return [class_block(scope, indent, name, value)]
        return [alias_line(scope, indent, name, value)]
    return [attribute_line(scope, indent, name, value, in_class=True)]


def assemble_class(header: str, cls: type, indent: str, blocks: List[List[str]]) -> List[str]:
    lines = [header]
    doc = cls.__doc__ if "__doc__" in vars(cls) and isinstance(vars(cls)["__doc__"], str) else None
    if doc and doc.strip():
        lines += docstring_lines(doc, indent)
        if blocks:
            lines.append("")
    lines += join_blocks(blocks)
    if len(lines) == 1:
        lines.append(f"{indent}...")
    return lines


def join_blocks(blocks: List[List[str]]) -> List[str]:
    """Blocks one after the other; a blank line around each block of more than one line."""
    lines: List[str] = []
    for position, block in enumerate(blocks):
        if position and (len(block) > 1 or len(blocks[position - 1]) > 1):
            lines.append("")
        lines += block
    return lines


def module_stub(index: ExtensionIndex, module: types.ModuleType, tool_name: str) -> str:
    """The text of `module`'s stub file."""
    scope = Scope(index, module)
    blocks: List[List[str]] = []
    for name, value in vars(module).items():
        if name in SKIP_MODULE:
            continue
        if isinstance(value, types.ModuleType):
            if value.__name__ == f"{module.__name__}.{name}":
                scope.relative_imports.append(f"from . import {name} as {name}")
            else:
                blocks.append([f"import {value.__name__} as {name}"])
        elif inspect.isclass(value):
            if index.locate(value) == (module.__name__, name):
                blocks.append(class_block(scope, "", name, value))
            else:
                blocks.append(alias_line(scope, "", name, value))
        elif inspect.isbuiltin(value) or inspect.isfunction(value):
            blocks.extend(function_blocks(scope, "", name, value, "function"))
        else:
            blocks.append(attribute_line(scope, "", name, value, in_class=False))
    body = join_blocks(blocks)

    lines = [f"# Type stubs for {module.__name__}, written by {tool_name} from the built module: do not edit."]
    if module.__doc__ and module.__doc__.strip():
        lines += docstring_lines(module.__doc__, "")
    imports = sorted(name for name in scope.imports if name != module.__name__)
    if imports or scope.relative_imports:
        lines.append("")
        lines += [f"import {name}" for name in imports]
        lines += scope.relative_imports
    if body:
        lines += ["", ""] + body
    return "\n".join(lines) + "\n"


# ---- files -----------------------------------------------------------------------------------------------


def stub_path(root: types.ModuleType, module: types.ModuleType) -> str:
    """The stub file of `module`, relative to the directory holding the extension (posix separators)."""
    parts = module.__name__.split(".")[len(root.__name__.split(".")) - 1:]
    if module is root or submodules(module):
        return "/".join(parts + ["__init__.pyi"])
    return "/".join(parts[:-1] + [parts[-1] + ".pyi"])


def generate(module: types.ModuleType, tool_name: str = "python/tools/generate_stubs.py") -> Dict[str, str]:
    """The stubs of extension `module` and its submodules: {relative path: text}."""
    index = index_extension(module)
    return {stub_path(module, m): module_stub(index, m, tool_name) for m in index.modules}


def stub_files_on_disk(output_dir: Path, top: str) -> List[str]:
    directory = output_dir / top
    if not directory.is_dir():
        return []
    return sorted(path.relative_to(output_dir).as_posix() for path in directory.rglob("*.pyi"))


def write(stubs: Dict[str, str], output_dir: Path) -> List[str]:
    """Writes `stubs` under `output_dir` (files whose text is unchanged are left alone, so their times stay)
    and removes the other .pyi files of the stub directory. Returns the paths written or removed."""
    top = next(iter(stubs)).split("/")[0]
    changed = []
    for relative in stub_files_on_disk(output_dir, top):
        if relative not in stubs:
            (output_dir / relative).unlink()
            changed.append(relative)
    for relative, text in stubs.items():
        path = output_dir / relative
        if path.is_file() and path.read_bytes() == text.encode("utf-8"):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
        changed.append(relative)
    for directory in sorted((p for p in (output_dir / top).rglob("*") if p.is_dir()), reverse=True):
        if not any(directory.iterdir()):
            directory.rmdir()
    return changed


def differences(stubs: Dict[str, str], output_dir: Path) -> List[str]:
    """The stub files that are missing, stale or extra under `output_dir`."""
    top = next(iter(stubs)).split("/")[0]
    found = []
    for relative, text in stubs.items():
        path = output_dir / relative
        if not path.is_file():
            found.append(f"{relative}: missing")
        elif path.read_bytes() != text.encode("utf-8"):
            found.append(f"{relative}: differs from the module")
    found += [f"{relative}: not a stub of the module" for relative in stub_files_on_disk(output_dir, top)
              if relative not in stubs]
    return found


def check_valid(stubs: Dict[str, str]) -> None:
    """@throws SyntaxError naming the file if a stub is not valid Python (a bug of this tool)."""
    for relative, text in stubs.items():
        try:
            ast.parse(text, filename=relative)
        except SyntaxError as error:
            raise SyntaxError(f"generate_stubs.py wrote invalid Python for {relative}: {error}") from error


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--module", default="gpumem._gpumem", help="the extension module to import")
    parser.add_argument("--output-dir", required=True, type=Path,
                        help="the directory that holds the extension; the stubs go to <dir>/<module's name>/")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the stubs on disk differ from the module")
    args = parser.parse_args(argv)
    os.environ.setdefault("GPUMEM_BACKEND", "host")  # importing must not need a GPU
    try:
        module = importlib.import_module(args.module)
    except ModuleNotFoundError as error:
        print(f"generate_stubs.py: cannot import {args.module} ({error}); is PYTHONPATH the build's python/ "
              f"directory?", file=sys.stderr)
        return 2
    except ImportError as error:
        print(f"generate_stubs.py: importing {args.module} failed: {error}", file=sys.stderr)
        return 2
    stubs = generate(module)
    check_valid(stubs)
    if args.check:
        found = differences(stubs, args.output_dir)
        for line in found:
            print(f"generate_stubs.py: {args.output_dir / line}", file=sys.stderr)
        return 1 if found else 0
    write(stubs, args.output_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
