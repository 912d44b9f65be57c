"""The pytest harness's proxy mode, run INSIDE the sandbox (see ``pytest_runner``).

:func:`module_server` is the solution's process: it imports the rollout's modules
when asked and serves calls, attribute reads and builtin operations on them. In the
harness, :class:`ModuleServer` is the import hook that gives the tests proxy modules
built from the rollout's parsed source (:func:`describe_source`, never run), and
:class:`ProxyRemote` stands in for each of the rollout's objects. Objects that are not plain
data cross as handles, ``(HANDLE, id, type name)`` from the solution and ``(HANDLE,
id)`` back to it.
"""

import os
import sys

from .boundary import SolutionError
from .plain_data import BUILTINS, MAX_DEPTH, PLAIN, Refused, as_plain, describe_refusal
from .solution_side import make_answerer, requests
from .untrusted import Solution

HANDLE = "\x00execgym-handle"
PROXY_OPERATIONS = ("len", "iter", "next", "bool", "str", "int", "float", "getitem", "contains")
"""What a :class:`ProxyRemote` forwards as builtin operations (its dunder methods)."""


def module_server(libraries, commands, answers):
    """The solution's side in proxy mode: import modules and serve requests until EOF.

    It sees the same site-packages as the tests (``libraries``), like a rollout run in
    mode ``in_process``.
    """
    import importlib
    import operator

    answer, raised, reply, flush = make_answerer(answers, {})
    objects, plain_types = {}, (str, bytes, int, float, complex, list, tuple, set, frozenset, dict)
    builtin_ops = {
        "len": len,
        "iter": iter,
        "next": next,
        "bool": bool,
        "str": str,
        "int": int,
        "float": float,
        "getitem": operator.getitem,
        "contains": operator.contains,
    }
    scalars = (type(None), bool, int, float, complex, str, bytes)
    sys.path.insert(0, os.getcwd())
    sys.path.append(libraries)

    offender = [None]

    def export(value, depth=0):
        kind = type(value)
        if kind in scalars:
            return value
        if depth > MAX_DEPTH:
            raise RecursionError("nested too deep")
        if kind in (list, tuple, set, frozenset):
            return kind(export(item, depth + 1) for item in value)
        if kind is dict:
            return {export(k, depth + 1): export(v, depth + 1) for k, v in value.items()}
        plain = as_plain(value, kind)
        if plain is not None:
            return export(plain, depth + 1)
        if issubclass(kind, plain_types):
            offender[0] = value
            raise Refused(kind)
        objects[len(objects)] = value
        return (HANDLE, len(objects) - 1, kind.__name__)

    def unwrap(value):
        kind = type(value)
        if kind is tuple and len(value) == 2 and value[0] == HANDLE:
            return objects[value[1]]
        if kind in (list, tuple, set, frozenset):
            return kind(unwrap(item) for item in value)
        if kind is dict:
            return {unwrap(k): unwrap(v) for k, v in value.items()}
        return value

    def resolve(root, path):
        found = sys.modules[root[1]] if root[0] == "module" else objects[root[1]]
        for name in path:
            found = getattr(found, name)
        return found

    for request in requests(commands, flush):
        try:
            if request[0] == "import":
                for name in request[1]:
                    importlib.import_module(name)
                answer("loaded")
                continue
            target = resolve(request[1], request[2])
            if request[0] == "call":
                result = target(*unwrap(request[3]), **unwrap(request[4]))
            elif request[0] == "op":
                result = builtin_ops[request[3]](target, *unwrap(request[4]))
            else:
                result = target
            exported = export(result)
        except Refused:
            hack, why = describe_refusal(offender[0])
            answer("refused", hack, "the solution returned " + why)
            continue
        except BaseException as error:
            raised(error)
            continue
        reply(exported)


class ProxyRemote:
    """The harness's stand-in for an object that lives in the solution process."""

    __slots__ = ("_path", "_root", "_server")
    __hash__ = object.__hash__

    def __init__(self, server, root, path=()):
        object.__setattr__(self, "_server", server)
        object.__setattr__(self, "_root", root)
        object.__setattr__(self, "_path", tuple(path))

    def __call__(self, *args, **kwargs):
        __tracebackhide__ = True
        return self._server.request("call", self._root, self._path, list(args), kwargs)

    def __getattr__(self, name):
        __tracebackhide__ = True
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # introspection (inspect, pytest) stays local
        return self._server.request("get", self._root, (*self._path, name))

    def __setattr__(self, name, value):
        raise TypeError("proxy mode: the tests cannot set attributes of the rollout's objects")

    def __eq__(self, other):
        if self is other:
            return True
        if not self._path or isinstance(other, ProxyRemote):
            return NotImplemented  # identity: the solution's __eq__ never decides
        value = self._server.request("get", self._root, self._path)
        return NotImplemented if isinstance(value, ProxyRemote) else value == other

    def __ne__(self, other):
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __repr__(self):
        where = self._root[1] if self._root[0] == "module" else "object %d" % self._root[1]
        return "<remote %s>" % ".".join([str(where), *self._path])

    def _op(self, name, *args):
        __tracebackhide__ = True
        return self._server.request("op", self._root, self._path, name, list(args))


def forwarding(operation):
    """A method of :class:`ProxyRemote` that applies ``operation`` in the solution process."""

    def method(self, *args):
        __tracebackhide__ = True
        if operation != "next":
            return self._op(operation, *args)
        try:
            return self._op(operation, *args)
        except SolutionError as error:  # the end of the rollout's iterator: only here
            if getattr(error, "execgym_solution", ("",))[0] != "StopIteration":
                raise
            raise StopIteration from None

    method.__name__ = "__%s__" % operation
    return method


for _operation in PROXY_OPERATIONS:  # len(), iter(), next(), bool(), str(), int(), float(), [], in
    setattr(ProxyRemote, "__%s__" % _operation, forwarding(_operation))


class ModuleServer:
    """The harness's side of proxy mode: the solution process and the proxy modules."""

    def __init__(self, files, libraries, codec, frames):
        self.modules = {}
        for name in files:
            if name.endswith(".py"):
                parts = name[:-3].split("/")
                package = parts[-1] == "__init__"
                parts = parts[:-1] if package else parts
                for depth in range(1, len(parts)):  # namespace packages on the way
                    self.modules.setdefault(".".join(parts[:depth]), (None, True))
                self.modules[".".join(parts)] = (name, package)
        self.solution = Solution("", "", codec, frames, module_server, (libraries,))
        self.dumps = codec[0]
        self.collected = False
        self.imported = []
        self.load_error = None

    def start(self):
        """Collection is over: import the rollout's modules the tests imported."""
        __tracebackhide__ = True
        self.collected = True
        try:
            self.solution.request(self.dumps(("import", self.imported)))
        except BaseException as error:
            self.load_error = error
            return error
        return None

    def request(self, kind, root, path, *rest):
        __tracebackhide__ = True  # pytest leaves the proxy out of failure reports
        if not self.collected:
            raise RuntimeError(
                "proxy mode: the tests use the rollout's %s while pytest collects them "
                "(at module level or in a decorator); call it inside a test, or give the "
                "task pytest_mode 'in_process'" % ".".join([str(root[1]), *path])
            )
        if self.load_error is not None:
            raise self.load_error
        try:
            payload = self.dumps((kind, root, list(path), *(self.wrap(v) for v in rest)))
        except (Refused, RecursionError) as error:
            raise TypeError(
                "proxy mode: an argument is not plain data (%s) nor an object of the "
                "rollout: %s; pass plain data (str(tmp_path), not tmp_path) or give the "
                "task pytest_mode 'in_process'" % (PLAIN, error)
            ) from None
        return self.unwrap(self.solution.request(payload)[1])

    def wrap(self, value):
        kind = type(value)
        if kind is ProxyRemote:
            if value._path or value._root[0] == "module":
                value = self.request("get", value._root, value._path)
                if type(value) is not ProxyRemote:
                    return value
            return (HANDLE, value._root[1])
        if kind in (list, tuple, set, frozenset):
            return kind(self.wrap(item) for item in value)
        if kind is dict:
            return {self.wrap(k): self.wrap(v) for k, v in value.items()}
        return value

    def unwrap(self, value):
        kind = type(value)
        if kind is tuple and len(value) == 3 and value[0] == HANDLE:
            return ProxyRemote(self, ("handle", value[1]))
        if kind in (list, tuple, set, frozenset):
            return kind(self.unwrap(item) for item in value)
        if kind is dict:
            return {self.unwrap(k): self.unwrap(v) for k, v in value.items()}
        return value

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.modules or fullname in sys.builtin_module_names:
            return None
        import importlib.machinery
        import importlib.util

        # A rollout's ``random.py`` never stands in for the standard library's (or a
        # site-package's) here, even with the work directory first on sys.path; nor do
        # its ``xml/dom/minidom.py`` for a module of a real package.
        top = fullname.partition(".")[0]
        here = os.getcwd()
        elsewhere = [p for p in sys.path if os.path.abspath(p or ".") != here]
        real = importlib.machinery.PathFinder.find_spec(top, elsewhere)
        if real is not None:
            return real if top == fullname else None
        package = self.modules[fullname][1]
        return importlib.util.spec_from_loader(fullname, self, is_package=package)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name = module.__name__
        file_name, package = self.modules[name]
        if package:
            module.__path__ = []
        source = b""
        if file_name is not None:
            with open(file_name, "rb") as handle:
                source = handle.read()
        names, values, errors, everything = describe_source(source, file_name or name)
        for key, value in values.items():
            setattr(module, key, value)
        for key, base in errors.items():
            error_class = type(key, (base,), {"__module__": name})
            setattr(module, key, error_class)
            self.solution.errors[key] = error_class
        server, root = self, ("module", name)

        def missing(attribute):
            if attribute in names or (everything and not attribute.startswith("__")):
                return ProxyRemote(server, root, (attribute,))
            raise AttributeError("module %r has no attribute %r" % (name, attribute))

        module.__getattr__ = missing
        module.__all__ = sorted(n for n in names if not n.startswith("_"))
        if file_name is not None:
            self.imported.append(name)
            if self.collected and self.load_error is None:
                # imported by a test body, after collection: the solution process
                # imports it now (its error is the test's, as a real import's would be)
                __tracebackhide__ = True
                self.solution.request(self.dumps(("import", [name])))


def describe_source(source, file_name):
    """What a module defines, from its parsed source (never run).

    Returns (top-level names, literal constants assigned once, exception classes as
    {name: builtin base class}, whether names may appear dynamically). A syntax error
    is raised as is (a collection error, as the real import would give).
    """
    import ast

    tree = ast.parse(source, file_name)
    names, literals, counts, bases = set(), {}, {}, {}
    everything = any(
        isinstance(node, ast.Name) and node.id in ("globals", "exec", "vars", "setattr")
        for node in ast.walk(tree)
    )

    def bind(target, value=None):
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                names.add(node.id)
                counts[node.id] = counts.get(node.id, 0) + 1
        if isinstance(target, ast.Name) and value is not None:
            try:
                literals[target.id] = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass

    def base_names(node):
        return [getattr(base, "id", getattr(base, "attr", "")) for base in node.bases]

    def visit(body):
        nonlocal everything
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bind(ast.Name(node.name))
                if isinstance(node, ast.ClassDef):
                    bases[node.name] = base_names(node)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    bind(target, node.value if len(node.targets) == 1 else None)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                bind(node.target, node.value if isinstance(node, ast.AnnAssign) else None)
                if isinstance(node, ast.AugAssign):
                    bind(node.target)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        everything = True
                    else:
                        names.add(alias.asname or alias.name.split(".")[0])
                        counts[alias.asname or alias.name] = 2
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
                for target in [getattr(node, "target", None)] + [
                    item.optional_vars for item in getattr(node, "items", ())
                ]:
                    if target is not None:
                        bind(target)
                        bind(target)
            for field in ("body", "orelse", "finalbody"):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    visit(getattr(node, field, None) or [])
            for handler in getattr(node, "handlers", None) or []:
                visit(handler.body)

    visit(tree.body)
    errors = {}
    for _ in range(len(bases) + 1):  # classes deriving from the module's own exceptions
        for name, base_names in bases.items():
            for base in base_names:
                found = errors.get(base) or BUILTINS.get(base)
                if isinstance(found, type) and issubclass(found, BaseException):
                    errors[name] = found
                    break
    constants = {k: v for k, v in literals.items() if counts.get(k) == 1 and k not in bases}
    return names, constants, errors, everything


class ImportGuard:
    """From the end of collection on, the harness imports nothing the rollout could write.

    The harness and the solution's process share a uid, so every directory the harness
    can write (the work dir, ``/tmp``, ``/dev/shm``) the rollout can write too. A module
    it leaves there under a standard-library name (``getpass.py``, ``pickle.py``) would
    otherwise be found by a later import in the harness (pytest's ``tmp_path`` fixture
    imports ``getpass``; a test body's ``import pickle``) and run beside the nonce.

    :meth:`install` is called once collection is over, before any of the rollout's code
    has run. It reads the task's own modules in the work dir (the test files and their
    helpers, as the host wrote them) into memory, and puts the guard in
    ``sys.meta_path`` right after the :class:`ModuleServer`: from then on a module is
    found only in a ``sys.path`` entry on a read-only mount (the standard library,
    site-packages; the sandbox cannot remount), or, in a writable directory, only as
    one of those copies. Anything else is ``ModuleNotFoundError``, never a file the
    rollout wrote after the tests were collected.
    """

    def __init__(self, skip_files):
        self.skip = {os.path.abspath(name) for name in skip_files}
        self.copies = {}
        self.trusted = {}

    def install(self, work):
        for folder, _, files in os.walk(work):
            for name in files:
                path = os.path.join(folder, name)
                if name.endswith(".py") and path not in self.skip and not os.path.islink(path):
                    with open(path, "rb") as handle:
                        self.copies[path] = handle.read()
        position = 1 if sys.meta_path and isinstance(sys.meta_path[0], ModuleServer) else 0
        sys.meta_path.insert(position, self)
        sys.path_importer_cache.clear()

    def read_only(self, folder):
        """Whether no process of the sandbox can add a file to ``folder``.

        True on a read-only mount (no process can remount), or for a directory the run's
        uid neither owns (so it cannot ``chmod`` it) nor may write (gVisor reports its
        read-only mounts as writable to ``statvfs``, but their files keep the host's
        owners).
        """
        folder = os.path.abspath(folder or ".")
        known = self.trusted.get(folder)
        if known is None:
            try:
                known = bool(os.statvfs(folder).f_flag & os.ST_RDONLY) or (
                    os.stat(folder).st_uid != os.geteuid() and not os.access(folder, os.W_OK)
                )
            except OSError:
                known = False
            self.trusted[folder] = known
        return known

    def find_spec(self, fullname, path=None, target=None):
        import _imp
        import importlib.machinery
        import importlib.util

        if fullname in sys.builtin_module_names or _imp.is_frozen(fullname):
            return None  # the interpreter's own: not read from any directory
        leaf = fullname.rpartition(".")[2]
        for folder in list(sys.path if path is None else path):
            if not isinstance(folder, str):
                continue
            if self.read_only(folder):
                spec = importlib.machinery.PathFinder.find_spec(fullname, [folder], target)
                if spec is not None:
                    return spec
                continue
            base = os.path.join(os.path.abspath(folder or "."), leaf)
            for file_name, package in ((base + ".py", False), (base + "/__init__.py", True)):
                if file_name in self.copies:
                    loader = CopiedSource(fullname, file_name, self.copies[file_name])
                    return importlib.util.spec_from_file_location(
                        fullname,
                        file_name,
                        loader=loader,
                        submodule_search_locations=[base] if package else None,
                    )
        raise ModuleNotFoundError(
            "No module named %r (the pytest harness imports only from read-only "
            "directories and the task's own files once the tests are collected)" % fullname,
            name=fullname,
        )


class CopiedSource:
    """Loads one of the task's own modules from the copy :class:`ImportGuard` took."""

    def __init__(self, fullname, path, source):
        self.fullname, self.path, self.source = fullname, path, source

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(compile(self.source, self.path, "exec", dont_inherit=True), module.__dict__)

    def get_source(self, fullname):
        return self.source.decode("utf-8", "replace")
