"""What crosses the process boundary besides plain data; runs INSIDE the sandbox.

A part of every Python harness (see :data:`execgym.guest.BUNDLES`), shared by the
solution's side (:mod:`.solution_side`) and the harness's (:mod:`.untrusted`): the
exceptions that end a case or the tests, the per-case timer, the builtin operations the
tests may apply to a solution's object, the recipes that name such an object and
:class:`Remote`, the harness's stand-in for it, and the answers' shapes.
"""

import sys


class CaseTimeout(BaseException):
    """One call ran past its time limit (raised by SIGALRM in the solution's process)."""


def as_plain_class(kind):
    """Whether objects of ``kind`` may cross by value (they have no ``__slots__``)."""
    return "__slots__" not in vars(kind)


OPERATIONS = {
    "len": len,
    "bool": bool,
    "str": str,
    "repr": repr,
    "int": int,
    "float": float,
    "list": list,
    "getitem": lambda value, key: value[key],
    "contains": lambda value, item: item in value,
}
"""Builtin operations the tests apply to an object of the solution (by name)."""


def start_timer():
    """Install the ``SIGALRM`` handler; return ``set(seconds)`` (0 cancels).

    Through ``_signal``, the C module ``signal`` wraps: its enum conversions cost a fresh
    process about 70 copy-on-write page faults (see :mod:`execgym.guest.zygote_world`).
    """
    import _signal

    def on_alarm(signum, frame):
        raise CaseTimeout()

    _signal.signal(_signal.SIGALRM, on_alarm)
    set_timer, real = _signal.setitimer, _signal.ITIMER_REAL
    return lambda seconds: set_timer(real, seconds)


class SolutionError(Exception):
    """The solution raised an exception that is not a builtin one (its type is named)."""


class SolutionAborted(BaseException):
    """The solution process ended, or raised SystemExit/KeyboardInterrupt: tests stop."""


class Tampered(BaseException):
    """The solution answered with something that is not plain data, or a forged frame."""


def patch(original, new):
    """Make ``original`` (the tests' argument) hold ``new`` (its state after the call).

    Lists, dicts, sets and objects crossing by value are changed in place, recursively
    where both sides hold the same kind of container, so the tests' other references to
    the same objects see the change too; anything else cannot change in place.
    """
    kind = type(original)
    if kind is not type(new):
        return new
    if kind is list:
        original[:] = [
            patch(old, item) if index < len(original) else item
            for index, (old, item) in enumerate(
                zip(original + [None] * len(new), new, strict=False)
            )
        ]
    elif kind is dict:
        merged = {
            key: patch(original[key], item) if key in original else item
            for key, item in new.items()
        }
        original.clear()
        original.update(merged)
    elif kind is set:
        original.clear()
        original.update(new)
    elif getattr(original, "__dict__", None) is not None and kind.__module__ == "tests":
        state = {
            key: patch(original.__dict__[key], item) if key in original.__dict__ else item
            for key, item in vars(new).items()
        }
        original.__dict__.clear()
        original.__dict__.update(state)
    else:
        return new
    return original


def recipe_root(recipe):
    """The object a recipe starts from: ``("id", n)`` for one a call made, or a name."""
    while True:
        what = recipe[0]
        if what == "get":
            recipe = recipe[1]
        elif what == "op" or (what == "call" and recipe[2][0] == "get"):
            recipe = recipe[2]
        elif what == "call":
            return ("id", recipe[1])
        else:
            return tuple(recipe)


def collect(value, roots, seen):
    """Add the roots of the recipes in ``value`` (and in those recipes) to ``roots``."""
    stack = [value]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is Remote:
            value = value._recipe
            kind = tuple
            roots.add(recipe_root(value))
        if kind in (list, tuple, set, frozenset):
            if id(value) not in seen:
                seen.add(id(value))
                stack.extend(value)
        elif kind is dict:
            if id(value) not in seen:
                seen.add(id(value))
                stack.extend(value.values())
        elif (
            kind.__module__ == "tests"
            and type(getattr(value, "__dict__", None)) is dict
            and id(value) not in seen
        ):
            seen.add(id(value))
            stack.extend(value.__dict__.values())


def is_standard_module(name):
    """Whether ``name`` is a module of the standard library (never a file of the rollout)."""
    top = name.partition(".")[0]
    return top in getattr(sys, "stdlib_module_names", ()) or top in sys.builtin_module_names


class Remote:
    """The tests' stand-in for a name, object or call result of the solution's module.

    It holds a recipe (``("name", n)``, ``("call", id, target, args, kwargs)``, ``("get",
    target, attribute)``, ``("op", name, target, args)``, ``("target",)``) that the
    solution's process evaluates, so it works when every call is served by a fresh fork
    too: an object the tests made (``Solution()``, ``Pair(1, 2)``) is rebuilt there from
    its recipe, and what the tests did to it since (attributes set, methods called) is
    replayed from the log, in order. Calling a class is lazy (nothing runs until the
    object is used); calling anything else, reading an attribute and the builtin
    operations ask the solution at once and give plain data back, or another
    :class:`Remote`. Equality and hashing are by identity, so no ``__eq__`` of the
    solution ever decides a comparison of the tests.
    """

    __slots__ = ("_callable", "_kind", "_recipe", "_solution", "_truth")
    __hash__ = object.__hash__

    def __init__(self, solution, recipe, kind="object", truth=True, is_callable=True):
        for name, value in (
            ("_solution", solution),
            ("_recipe", recipe),
            ("_kind", kind),
            ("_truth", truth),
            ("_callable", is_callable),
        ):
            object.__setattr__(self, name, value)

    def __call__(self, *args, **kwargs):
        __tracebackhide__ = True
        solution = self._solution
        step = ("call", next(solution.ids), self._recipe, list(args), kwargs)
        if self._kind == "class":  # built where it is used
            return Remote(solution, step, "instance")
        result = solution.evaluate(step)
        if self._recipe[0] == "get":  # a method: what it did to its object is replayed
            solution.log.append(step)
        return result

    def __getattr__(self, name):
        __tracebackhide__ = True
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._solution.evaluate(("get", self._recipe, name))

    def __setattr__(self, name, value):
        solution = self._solution
        solution.log.append(("setattr", next(solution.ids), self._recipe, name, value))

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def __bool__(self):
        return bool(self._truth)

    def __repr__(self):
        return "<%s of the solution>" % self._kind

    def _op(self, name, *args):
        __tracebackhide__ = True
        return self._solution.evaluate(("op", name, self._recipe, list(args)))

    def __len__(self):
        return self._op("len")

    def __iter__(self):
        return iter(self._op("list"))

    def __getitem__(self, key):
        return self._op("getitem", key)

    def __contains__(self, item):
        return self._op("contains", item)

    def __str__(self):
        return self._op("str")

    def __int__(self):
        return self._op("int")

    def __float__(self):
        return self._op("float")


CONTROL_FLOW = (StopIteration, StopAsyncIteration)
"""Exceptions the solution raises that cross as :class:`SolutionError` (they would steer
the tests' loops)."""

ANSWER_SIZES = {
    "loaded": (1, 2),
    "ok": (2, 3),
    "raised": (5,),
    "refused": (3,),
    "missing": (2,),
    "timeout": (1,),
    "handle": (4,),
    "exited": (3,),
}
