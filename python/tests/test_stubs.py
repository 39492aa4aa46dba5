"""Type stubs and docstrings of gpumem.

The build writes stubs for the extension gpumem._gpumem next to it (<package>/_gpumem/__init__.pyi, one
.pyi per submodule) with python/tools/generate_stubs.py. These tests check that the stubs exist, parse, cover
every public name the package takes from the extension, match the module that was built (regenerated into
a temporary directory, byte for byte), and leave `import gpumem` alone. They also check the generator on a
fake extension (type names pybind11 prints, overloads, defaults, fallbacks, enums, namedtuples, layout).

The last test asks for a docstring, more than pybind11's bare signature line, on every public function,
class, method, property and module of gpumem (the extension's and the pure-Python modules alike).
"""

import ast
import collections
import enum
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import pkgutil
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import gpumem
import gpumem._gpumem

GENERATOR = Path(__file__).resolve().parents[1] / "tools" / "generate_stubs.py"
NOT_GENERATED = ("the build did not generate the type stubs: {missing} is missing. The build of target "
                 "gpumem_python_module runs python/tools/generate_stubs.py after linking (a POST_BUILD step in "
                 "python/CMakeLists.txt); rebuild, or run it by hand: PYTHONPATH=<build>/python python3 "
                 "python/tools/generate_stubs.py --output-dir <build>/python/gpumem")


def load_generator():
    """python/tools/generate_stubs.py as a module (it is a build tool, not part of the package)."""
    if "gpumem_generate_stubs" in sys.modules:
        return sys.modules["gpumem_generate_stubs"]
    spec = importlib.util.spec_from_file_location("gpumem_generate_stubs", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def compiled_modules():
    """gpumem._gpumem and its submodules (pybind11's def_submodule), parents first."""
    found = []

    def visit(module):
        found.append(module)
        for name, value in vars(module).items():
            if isinstance(value, types.ModuleType) and value.__name__ == f"{module.__name__}.{name}":
                visit(value)

    visit(gpumem._gpumem)
    return found


PACKAGE_DIR = Path(gpumem._gpumem.__file__).resolve().parent


def stub_file(module):
    """The stub of compiled `module`: <package>/_gpumem/<sub>.pyi, or <sub>/__init__.pyi for a package."""
    parts = module.__name__.split(".")[1:]  # gpumem._gpumem.cuda -> _gpumem, cuda
    as_package = PACKAGE_DIR.joinpath(*parts, "__init__.pyi")
    return as_package if module is gpumem._gpumem or as_package.exists() else PACKAGE_DIR.joinpath(
        *parts[:-1], parts[-1] + ".pyi")


@pytest.fixture(scope="module")
def stubs():
    """{compiled module: parsed stub}; fails, saying the build did not generate them, when one is missing."""
    parsed = {}
    for module in compiled_modules():
        path = stub_file(module)
        if not path.is_file():
            pytest.fail(NOT_GENERATED.format(missing=path))
        parsed[module] = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return parsed


def defined_names(body):
    """The names a stub's module or class body defines (classes, functions, annotated or assigned names,
    imports)."""
    names = set()
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def stub_classes(tree):
    """{qualified name: ClassDef} of a stub, nested classes included."""
    found = {}

    def visit(body, prefix):
        for node in body:
            if isinstance(node, ast.ClassDef):
                found[prefix + node.name] = node
                visit(node.body, f"{prefix}{node.name}.")

    visit(tree.body, "")
    return found


# ---- the stubs the build wrote ---------------------------------------------------------------------------


def test_the_build_generated_a_stub_for_every_compiled_module():
    for module in compiled_modules():
        assert stub_file(module).is_file(), NOT_GENERATED.format(missing=stub_file(module))


def test_every_stub_is_valid_python(stubs):
    for module, tree in stubs.items():
        assert isinstance(tree, ast.Module), module.__name__
        compile(tree, str(stub_file(module)), "exec")  # parses and compiles: no invalid annotations


def test_every_public_name_taken_from_the_extension_has_a_stub_entry(stubs):
    missing = []
    for package in (gpumem, gpumem.mr, gpumem.cuda):
        for name in package.__all__:
            value = getattr(package, name)
            if isinstance(value, types.ModuleType):
                continue
            homes = [(m, attribute) for m in compiled_modules() for attribute, v in vars(m).items() if v is value]
            if not homes:
                continue  # pure Python: not the extension's
            if not any(attribute in defined_names(stubs[m].body) for m, attribute in homes):
                missing.append(f"{package.__name__}.{name} (from {homes[0][0].__name__}.{homes[0][1]})")
    assert not missing, "names without a stub entry: " + ", ".join(missing)


def test_every_member_of_every_compiled_class_has_a_stub_entry(stubs):
    missing = []
    for module in compiled_modules():
        classes = stub_classes(stubs[module])
        for name, value in vars(module).items():
            if not (inspect.isclass(value) and value.__name__ == name and name in classes):
                continue
            entries = defined_names(classes[name].body)
            if isinstance(value, enum.EnumMeta):  # an enum.Enum: its members are its API
                expected = list(value.__members__)
            elif issubclass(value, tuple) and hasattr(value, "_fields"):  # a namedtuple: its fields
                expected = list(value._fields)
            else:  # public entries, and the special methods the bindings define
                expected = [member for member, member_value in vars(value).items()
                            if member not in ("__doc__", "__members__") and (not member.startswith("_") or (
                                member.startswith("__") and (type(member_value).__name__ == "instancemethod"
                                                             or isinstance(member_value, (staticmethod, property)))))]
            missing += [f"{module.__name__}.{name}.{member}" for member in expected if member not in entries]
    assert not missing, "class members without a stub entry: " + ", ".join(missing)


def test_the_stubs_match_the_module_that_was_built(stubs, tmp_path):
    environment = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR.parent), GPUMEM_BACKEND="host")
    command = [sys.executable, str(GENERATOR), "--module", "gpumem._gpumem"]
    subprocess.run(command + ["--output-dir", str(tmp_path)], check=True, env=environment, timeout=120)
    regenerated = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.pyi"))
    on_disk = sorted(p.relative_to(PACKAGE_DIR).as_posix() for p in (PACKAGE_DIR / "_gpumem").rglob("*.pyi"))
    assert regenerated == on_disk
    for relative in regenerated:
        assert (tmp_path / relative).read_bytes() == (PACKAGE_DIR / relative).read_bytes(), (
            f"{PACKAGE_DIR / relative} is stale: rebuild gpumem_python_module")
    check = subprocess.run(command + ["--output-dir", str(PACKAGE_DIR), "--check"], env=environment,
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr


def test_generating_twice_gives_the_same_bytes():
    generator = load_generator()
    first = generator.generate(gpumem._gpumem)
    second = generator.generate(gpumem._gpumem)
    assert first == second
    assert set(first) == {stub_file(m).relative_to(PACKAGE_DIR).as_posix() for m in compiled_modules()}


def test_import_gpumem_loads_the_extension_next_to_the_stub_directory(stubs):
    code = ("import importlib.machinery, gpumem, gpumem._gpumem as g; "
            "assert any(g.__file__.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES), g.__file__; "
            "p = gpumem.alloc(256); gpumem.free(p); print('ok')")
    environment = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR.parent), GPUMEM_BACKEND="host")
    result = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True,
                            timeout=120)
    assert (PACKAGE_DIR / "_gpumem").is_dir()
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


# ---- the generator on a fake extension -------------------------------------------------------------------


def pybind11_function(name, doc):
    """A function that looks like pybind11's to the generator: its docstring starts with its signature."""

    def function(*args, **kwargs):
        raise AssertionError("never called")

    function.__name__ = function.__qualname__ = name
    function.__doc__ = doc
    return function


def pybind11_property(owner, returns, doc):
    getter = pybind11_function("", f"(arg0: {owner}) -> {returns}\n")
    return property(getter, None, None, doc)


def fake_extension():
    """fakepkg._ext with a submodule `sub` (which has its own submodule `deeper`)."""
    root = types.ModuleType("fakepkg._ext", "The fake extension.")
    sub = types.ModuleType("fakepkg._ext.sub", "A submodule.")
    deeper = types.ModuleType("fakepkg._ext.sub.deeper")
    root.sub, sub.deeper = sub, deeper

    gadget = type("Gadget", (), {"__module__": "fakepkg._ext.sub", "__doc__": "A gadget."})
    inner = type("Inner", (), {"__module__": "fakepkg._ext", "__qualname__": "Widget.Inner",
                               "__doc__": "Nested.", "depth": pybind11_property("fakepkg._ext.Widget.Inner",
                                                                                "int", "How deep.")})
    widget = type("Widget", (), {
        "__module__": "fakepkg._ext",
        "__doc__": "A widget.",
        "__init__": pybind11_function("__init__", "__init__(self: fakepkg._ext.Widget, size: int = 0, "
                                                  "stream: handle = None) -> None\n\nMakes one.\n"),
        "resize": pybind11_function("resize", "resize(self: fakepkg._ext.Widget, new_size: int, "
                                              "gadget: fakepkg._ext.sub.Gadget = <fakepkg._ext.sub.Gadget object "
                                              "at 0x7f0012345678>) -> None\n\nResizes.\n"),
        "create": staticmethod(pybind11_function("create", "create(n: int) -> fakepkg._ext.Widget\n\nMakes.\n")),
        "size": pybind11_property("fakepkg._ext.Widget", "int", "The size."),
        "Inner": inner,
        "__eq__": pybind11_function("__eq__", "__eq__(self: fakepkg._ext.Widget, arg0: object) -> object\n"),
        "__exit__": pybind11_function("__exit__", "__exit__(self: object, *args) -> bool\n\nLeaves.\n"),
        "shout": vars(str)["upper"],  # a method written against the C API (a method_descriptor)
        "globals_": vars(types.FunctionType)["__globals__"],  # an attribute written against the C API
    })
    widget.default = object.__new__(widget)
    root.Widget = widget
    root.FakeError = type("FakeError", (RuntimeError,), {"__module__": "fakepkg._ext", "__doc__": "Failed."})
    root.Color = enum.IntEnum("Color", {"RED": 1, "GREEN": 2}, module="fakepkg._ext")
    root.Pair = collections.namedtuple("Pair", "first second", module="fakepkg._ext")
    root.scale = pybind11_function("scale", "scale(*args, **kwargs)\nOverloaded function.\n\n"
                                            "1. scale(x: int) -> int\n\nScales an int.\n\n"
                                            "2. scale(x: float, factor: float = 2.0) -> float\n\nScales a float.\n")
    root.raw = pybind11_function("raw", "raw(p: capsule) -> gpumem::detail::thing\n\nC++ inside.\n")
    root.weird = pybind11_function("weird", "weird(a: int = 1, b: int) -> None\n\nNot Python.\n")
    root.keyword = pybind11_function("keyword", "keyword(lambda: int, data: buffer) -> numpy.ndarray[numpy.float32"
                                                "[3, 3]]\n")
    root.quoted = pybind11_function("quoted", 'quoted() -> str\n\nSays """hi""" with a \\ backslash "')
    root.VERSION = 3
    sub.Gadget = gadget
    sub.make_widget = pybind11_function("make_widget", "make_widget() -> fakepkg._ext.Widget\n\nA widget.\n")
    deeper.depth = pybind11_function("depth", "depth() -> Optional[List[fakepkg._ext.sub.Gadget]]\n")
    return root


@pytest.fixture
def fake():
    generator = load_generator()
    root = fake_extension()
    stubs = generator.generate(root, tool_name="test")
    return generator, root, stubs


def test_the_generator_writes_one_file_per_module_with_packages_for_submodules_that_have_submodules(fake):
    _, _, stubs = fake
    assert sorted(stubs) == ["_ext/__init__.pyi", "_ext/sub/__init__.pyi", "_ext/sub/deeper.pyi"]
    for relative, text in stubs.items():
        ast.parse(text, filename=relative)
    assert "from . import sub as sub" in stubs["_ext/__init__.pyi"]
    assert "from . import deeper as deeper" in stubs["_ext/sub/__init__.pyi"]


def function_lines(text):
    return {line.strip() for line in text.splitlines() if line.strip().startswith(("def ", "class ", "@"))}


def test_the_generator_turns_signatures_into_defs(fake):
    _, _, stubs = fake
    root, sub, deeper = stubs["_ext/__init__.pyi"], stubs["_ext/sub/__init__.pyi"], stubs["_ext/sub/deeper.pyi"]
    lines = function_lines(root)
    assert "def __init__(self, size: int = 0, stream: typing.Any = None) -> None:" in lines
    assert "def resize(self, new_size: int, gadget: fakepkg._ext.sub.Gadget = ...) -> None:" in lines
    assert "import fakepkg._ext.sub" in root
    assert "@staticmethod" in lines and "def create(n: int) -> Widget:" in lines
    assert "def size(self) -> int:" in lines and "@property" in lines
    assert "def __exit__(self, *args: typing.Any) -> bool:" in lines
    assert "def __eq__(self, arg0: object) -> object: ...  # type: ignore[override]" in lines
    assert "class Inner:" in lines and "def depth(self) -> int:" in lines
    assert "default: typing.ClassVar[Widget]" in root
    assert "def shout(self, /) -> typing.Any:  # typing.Any for the result (a C function)" in lines
    assert "globals_: typing.Any  # typing.Any for globals_ (an attribute written against the C API)" in root
    assert "class FakeError(RuntimeError):" in lines
    assert "VERSION: int" in root
    assert "def make_widget() -> fakepkg._ext.Widget:" in function_lines(sub)
    assert "def depth() -> typing.Optional[typing.List[fakepkg._ext.sub.Gadget]]: ..." in function_lines(deeper)


def test_the_generator_writes_overloads(fake):
    _, _, stubs = fake
    tree = ast.parse(stubs["_ext/__init__.pyi"])
    overloads = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "scale"]
    assert [ast.unparse(node.decorator_list[0]) for node in overloads] == ["typing.overload"] * 2
    assert [ast.get_docstring(node) for node in overloads] == ["Scales an int.", "Scales a float."]
    assert ast.unparse(overloads[1].args) == "x: float, factor: float=2.0"


def test_the_generator_falls_back_to_any_with_a_comment_saying_why(fake):
    _, _, stubs = fake
    text = stubs["_ext/__init__.pyi"]
    raw = next(line for line in text.splitlines() if line.startswith("def raw("))
    assert raw.startswith("def raw(p: typing.Any) -> typing.Any:  # typing.Any for ")
    assert "capsule" in raw and "gpumem::detail::thing (a C++ type not bound to Python)" in raw
    weird = next(line for line in text.splitlines() if line.startswith("def weird("))
    assert weird.startswith("def weird(*args: typing.Any, **kwargs: typing.Any) -> typing.Any:")
    assert "weird(a: int = 1, b: int) -> None" in weird
    keyword = next(line for line in text.splitlines() if line.startswith("def keyword("))
    assert keyword.startswith("def keyword(lambda_: int, data: typing.Any) -> numpy.ndarray: ...  # lambda_ is the "
                              "parameter 'lambda', not a Python name; typing.Any for buffer")


def test_the_generator_keeps_docstrings_exactly(fake):
    _, root, stubs = fake
    tree = ast.parse(stubs["_ext/__init__.pyi"])
    docs = {node.name: ast.get_docstring(node) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    assert docs["quoted"] == 'Says """hi""" with a \\ backslash "'
    assert docs["Widget"] == "A widget." and docs["resize"] == "Resizes." and docs["keyword"] is None
    assert ast.get_docstring(tree) == "The fake extension."


def test_the_generator_writes_enums_and_namedtuples(fake):
    _, _, stubs = fake
    classes = stub_classes(ast.parse(stubs["_ext/__init__.pyi"]))
    assert ast.unparse(classes["Color"].bases[0]) == "enum.IntEnum"
    assert [ast.unparse(node) for node in classes["Color"].body] == ["RED = 1", "GREEN = 2"]
    assert ast.unparse(classes["Pair"].bases[0]) == "typing.NamedTuple"
    assert defined_names(classes["Pair"].body) == {"first", "second"}
    assert "import enum" in stubs["_ext/__init__.pyi"]


@pytest.mark.parametrize("printed, expected", [
    ("int", "int"),
    ("handle", "typing.Any"),
    ("object", "object"),
    ("numpy.ndarray[numpy.float32[3, 3]]", "numpy.ndarray"),
    ("numpy.ndarray[numpy.float64[3, 1], flags.writeable]", "numpy.ndarray"),
    ("dtype", "numpy.dtype"),
    ("function", "typing.Callable[..., typing.Any]"),
    ("Callable[[int], bool]", "typing.Callable[[int], bool]"),
    ("Callable[[], None]", "typing.Callable[[], None]"),
    ("Dict[str, List[int]]", "typing.Dict[str, typing.List[int]]"),
    ("Optional[fakepkg._ext.Widget]", "typing.Optional[Widget]"),
    ("fakepkg._ext.Widget.Inner", "Widget.Inner"),
    ("fakepkg._ext.sub.Gadget", "fakepkg._ext.sub.Gadget"),
    ("int | None", "int | None"),
    ("collections.abc.Callable[[typing.SupportsInt], bool]", "collections.abc.Callable[[typing.SupportsInt], bool]"),
    ("typing.Annotated[numpy.typing.ArrayLike, numpy.float32, '[m, 1]']",
     "typing.Annotated[numpy.typing.ArrayLike, numpy.float32, '[m, 1]']"),
    ("iterable", "typing.Iterable[typing.Any]"),
    ("capsule", None),
    ("buffer", None),
    ("gpumem::mr::device_memory_resource", None),
    ("std::vector<int, std::allocator<int>>", None),
    ("NoSuchType", None),
    ("List[NoSuchType]", "typing.List[typing.Any]"),
    ("int]]", None),
])
def test_the_generator_maps_pybind11_type_names_to_valid_annotations(printed, expected):
    generator = load_generator()
    root = fake_extension()
    scope = generator.Scope(generator.index_extension(root), root)
    rendered = scope.annotation(printed)
    ast.parse(rendered, mode="eval")
    notes = scope.take_notes()
    if expected is None:  # a fallback, and the comment says what it stood for
        assert rendered == "typing.Any"
        assert notes.startswith("  # typing.Any for ") and printed.split("<")[0].split("::")[0] in notes
    else:
        assert rendered == expected
        assert ("typing.Any for" in notes) == ("NoSuchType" in printed)


@pytest.mark.parametrize("printed, expected", [
    ("None", "None"), ("0", "0"), ("-1", "-1"), ("2.5", "2.5"), ("True", "True"), ("'float32'", "'float32'"),
    ("<fakepkg._ext.Color.RED: 1>", "..."), ("<fakepkg._ext.Widget object at 0x7f0012345678>", "..."),
    ("[1, 2]", "..."), ("inf", "..."),
])
def test_the_generator_writes_defaults_as_literals_or_ellipsis(printed, expected):
    assert load_generator().literal_default(printed) == expected


def test_the_generator_replaces_stale_files_and_check_reports_differences(fake, tmp_path):
    generator, _, stubs = fake
    stale = tmp_path / "_ext" / "old.pyi"
    stale.parent.mkdir(parents=True)
    stale.write_text("x: int\n")
    assert sorted(generator.differences(stubs, tmp_path)) == [
        "_ext/__init__.pyi: missing", "_ext/old.pyi: not a stub of the module",
        "_ext/sub/__init__.pyi: missing", "_ext/sub/deeper.pyi: missing"]
    generator.write(stubs, tmp_path)
    assert not stale.exists() and generator.differences(stubs, tmp_path) == []
    assert generator.write(stubs, tmp_path) == []  # unchanged files are not rewritten
    (tmp_path / "_ext" / "sub" / "deeper.pyi").write_text("edited\n")
    assert generator.differences(stubs, tmp_path) == ["_ext/sub/deeper.pyi: differs from the module"]


# ---- docstrings on everything public ---------------------------------------------------------------------

_SIGNATURE_LINE = re.compile(r"^(\d+\.\s+)?[\w.]*\(.*\)(\s*->\s*\S.*)?$")


def documented(doc):
    """Whether `doc` says more than pybind11's signature lines."""
    lines = [line.strip() for line in (doc or "").strip().splitlines()]
    return any(line and not _SIGNATURE_LINE.match(line) and line != "Overloaded function." for line in lines)


def public_modules():
    """gpumem's public modules: the package, its public submodules (found on disk; those that need a
    missing third-party module are left out), and the extension with its submodules."""
    modules = [gpumem, gpumem.mr, gpumem.cuda]
    broken = []
    for info in pkgutil.walk_packages(gpumem.__path__, "gpumem.", onerror=broken.append):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        spec = info.module_finder.find_spec(info.name)
        if spec is None or isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            continue  # a shared library next to the package (the PyTorch allocator's), not a Python module
        try:
            module = importlib.import_module(info.name)
        except ModuleNotFoundError as error:
            if (error.name or "").split(".")[0] == "gpumem":
                raise
            continue  # needs a third-party module that is not installed here
        if module not in modules:
            modules.append(module)
    return modules + compiled_modules()


def is_ours(value):
    return (getattr(value, "__module__", None) or "").split(".")[0] == "gpumem"


def class_members(cls):
    """(name, object) of a class's own public methods, properties and nested classes."""
    pybind11_enum = "__entries" in vars(cls) and "__members__" in vars(cls)
    for name, value in vars(cls).items():
        if name.startswith("_") or (pybind11_enum and name in ("name", "value")):
            continue  # private, or pybind11's own enum machinery
        if isinstance(value, (staticmethod, classmethod)):
            yield name, value.__func__
        elif (type(value).__name__ == "instancemethod" or inspect.isroutine(value) or inspect.isclass(value)
              or (inspect.isdatadescriptor(value) and not isinstance(value, types.MemberDescriptorType))):
            yield name, value


def undocumented_names():
    """Qualified names of the public entities of gpumem whose docstring is missing or only a signature."""
    seen, missing = set(), []

    def check(qualified, value):
        if id(value) in seen:
            return
        seen.add(id(value))
        if not documented(getattr(value, "__doc__", None)):
            missing.append(qualified)
        if inspect.isclass(value):
            for name, member in class_members(value):
                check(f"{qualified}.{name}", member)

    for module in public_modules():
        check(module.__name__, module)
        names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        for name in names:
            value = getattr(module, name, None)
            if (inspect.isclass(value) or inspect.isroutine(value)) and is_ours(value):
                check(f"{module.__name__}.{name}", value)
    return missing


def test_everything_public_has_a_docstring():
    missing = undocumented_names()
    assert not missing, f"{len(missing)} public names without a docstring (or only a signature line):\n  " + (
        "\n  ".join(missing))


def test_the_docstring_check_tells_a_signature_from_a_docstring():
    assert not documented(None) and not documented("") and not documented("f(x: int) -> int\n")
    assert not documented("(arg0: gpumem._gpumem.Widget) -> int\n")
    assert not documented("f(*args, **kwargs)\nOverloaded function.\n\n1. f(x: int) -> int\n\n2. f(x: str) -> int\n")
    assert documented("f(x: int) -> int\n\nDoubles x.\n") and documented("A widget.")
