"""Plain data across a process boundary: the code both harnesses run INSIDE the sandbox.

Every Python harness script starts with this module's source, then
:mod:`execgym.guest.untrusted` (the solution's process and the harness's handle on
it), then the harness's own (see :func:`execgym.judges._programs.harness_program`).
Values cross the process boundary as length-prefixed frames (:func:`make_frames`) of
plain data (:func:`make_codec`: ``None``, ``bool``, ``int``, ``float``, ``complex``,
``str``, ``bytes``, ``list``, ``tuple``, ``set``, ``frozenset``, ``dict``; exact types,
at most 100 levels deep). Whatever the harness receives is decoded into fresh builtin
objects, so no method of the solution ever runs in the harness.

Standard library only, and importable on the host too (execgym encodes jobs with the
same codec); importing it has no side effect.
"""

import sys

MAX_DEPTH = 100
ARGUMENT_DEPTH = 250
"""How deep the tests' arguments may nest: more than any answer of the solution
(:data:`MAX_DEPTH`), so a value the solution returned can always be passed back to it."""
PLAIN = "None, bool, int, float, complex, str, bytes, list, tuple, set, frozenset, dict"
PLAIN_TYPES = (type(None), bool, int, float, complex, str, bytes, list, tuple, set, frozenset, dict)


class Refused(Exception):
    """A value that is not plain data (encoding) or a malformed message (decoding)."""


def make_codec(export=None, restore=None, make_object=None, limit=MAX_DEPTH):
    """Encoder and decoder of plain data, bound to local names before any solution runs.

    Plain data are exact builtin types (:data:`PLAIN`), nested at most ``limit`` levels.
    Two extensions, both off by default:

    - ``export(value)``, for a value that is not plain data, returns ``("O", class name,
      attributes)`` for an object that crosses by value (its attributes as a ``dict``;
      objects are sent once each, in a table, so shared nodes, cycles and long linked
      lists cross without nesting), or ``(tag, payload)`` for any other extension, whose
      payload is itself encoded; it raises :class:`Refused` for anything else.
    - ``restore(tag, payload)`` rebuilds an extension when decoding (``None``: refused),
      ``make_object(class name)`` an empty object of a table (``None``: refused), whose
      ``__dict__`` is then filled with the decoded attributes.

    Returns:
        ``(dumps, loads)``: ``dumps(value) -> bytes``, ``loads(bytes) -> value``; both
        raise :class:`Refused`.
    """
    type_of, length, join, ident = type, len, "".join, id
    NoneType = type(None)
    containers = {list: "l", tuple: "t", set: "S", frozenset: "z"}
    builders = {"l": list, "t": tuple, "S": set, "z": frozenset}

    def encode(value, out, depth, table):
        kind = type_of(value)
        if depth > limit:
            raise Refused("nested deeper than %d levels (or refers to itself)" % limit)
        if kind is NoneType:
            out.append("N")
        elif kind is bool:
            out.append("T" if value else "F")
        elif kind is int:
            out.append("i%x;" % value)
        elif kind is float:
            out.append("f" + value.hex() + ";")
        elif kind is str:
            out.append("s%d:" % length(value))
            out.append(value)
        elif kind is bytes:
            out.append("b%d:" % length(value))
            out.append(value.decode("latin-1"))
        elif kind is complex:
            out.append("c" + value.real.hex() + "," + value.imag.hex() + ";")
        elif kind in containers:
            out.append("%s%d:" % (containers[kind], length(value)))
            for item in value:
                encode(item, out, depth + 1, table)
        elif kind is dict:
            out.append("d%d:" % length(value))
            for key, item in value.items():
                encode(key, out, depth + 1, table)
                encode(item, out, depth + 1, table)
        else:
            plain = as_plain(value, kind)
            if plain is not None:
                encode(plain, out, depth + 1, table)
                return
            if export is None:
                raise Refused(kind)
            found = table[0].get(ident(value))
            if found is not None:
                out.append("o%x;" % found)
                return
            extension = export(value)
            if extension[0] == "O":
                index = length(table[1])
                table[0][ident(value)] = index
                table[1].append((value, extension[1], extension[2]))  # keeps it alive
                out.append("o%x;" % index)
                return
            out.append("X")
            encode(extension[0], out, depth + 1, table)
            encode(extension[1], out, depth + 1, table)

    def dumps(value):
        out, table = [], ({}, [])
        encode(value, out, 0, table)
        if not table[1]:
            return join(out).encode("utf-8", "surrogatepass")
        names, states, done = [], [], 0
        while done < length(table[1]):  # an object's attributes may add more objects
            _, name, attributes = table[1][done]
            if type_of(attributes) is not dict:
                raise Refused("the attributes of a %s are not a dict" % name)
            names.append(name)
            state = []
            encode(attributes, state, 0, table)
            states.append(join(state))
            done += 1
        head = []
        encode(names, head, 0, ({}, []))
        text = "G" + join(head) + join(states) + join(out)
        return text.encode("utf-8", "surrogatepass")

    def number(text, start, end_char):
        end = text.index(end_char, start)
        return text[start:end], end + 1

    def decode(text, at, depth, objects):
        if depth > limit:
            raise Refused("nested too deep")
        tag = text[at]
        at += 1
        if tag == "N":
            return None, at
        if tag == "T":
            return True, at
        if tag == "F":
            return False, at
        if tag == "i":
            digits, at = number(text, at, ";")
            return int(digits, 16), at
        if tag == "f":
            digits, at = number(text, at, ";")
            return float.fromhex(digits), at
        if tag == "c":
            digits, at = number(text, at, ";")
            real, imag = digits.split(",")
            return complex(float.fromhex(real), float.fromhex(imag)), at
        if tag == "o":
            digits, at = number(text, at, ";")
            return objects[int(digits, 16)], at
        if tag == "X":
            if restore is None:
                raise Refused("an extension where only plain data may be")
            name, at = decode(text, at, depth + 1, objects)
            payload, at = decode(text, at, depth + 1, objects)
            return restore(name, payload), at
        count, at = number(text, at, ":")
        count = int(count)
        if count < 0:
            raise Refused("negative length")
        if tag == "s" or tag == "b":
            if at + count > length(text):
                raise Refused("truncated string")
            chunk = text[at : at + count]
            return (chunk if tag == "s" else chunk.encode("latin-1")), at + count
        if tag == "d":
            result = {}
            for _ in range(count):
                key, at = decode(text, at, depth + 1, objects)
                result[key], at = decode(text, at, depth + 1, objects)
            return result, at
        if tag not in builders:
            raise Refused("unknown tag %r" % tag)
        items = []
        for _ in range(count):
            item, at = decode(text, at, depth + 1, objects)
            items.append(item)
        return builders[tag](items), at

    def loads(data):
        try:
            text = data.decode("utf-8", "surrogatepass")
            objects, at = [], 0
            if text[:1] == "G":
                if make_object is None:
                    raise Refused("objects where only plain data may be")
                names, at = decode(text, 1, 0, objects)
                if type_of(names) is not list or not all(type_of(n) is str for n in names):
                    raise Refused("malformed object table")
                objects.extend(make_object(name) for name in names)
                for made in objects[:]:
                    attributes, at = decode(text, at, 0, objects)
                    if type_of(attributes) is not dict:
                        raise Refused("malformed object")
                    made.__dict__.update(attributes)
            value, end = decode(text, at, 0, objects)
        except Refused:
            raise
        except Exception as error:  # IndexError, ValueError, TypeError (unhashable key)
            raise Refused("malformed: %s: %s" % (type_of(error).__name__, error)) from None
        if end != length(text):
            raise Refused("trailing bytes")
        return value

    return dumps, loads


def as_plain(value, kind):
    """The standard library's containers as plain data (a ``Counter`` is a ``dict``).

    ``Counter``, ``OrderedDict``, ``defaultdict`` and ``deque`` by identity, and named
    tuples that keep ``tuple``'s comparisons; ``None`` for anything else. Whatever this
    returns is encoded as plain data, so nothing of the value's class crosses over.
    """
    found = sys.modules.get("collections")
    if found is not None:
        if kind in (found.Counter, found.OrderedDict, found.defaultdict):
            return dict(value)
        if kind is found.deque:
            return list(value)
    if (
        issubclass(kind, tuple)
        and hasattr(kind, "_fields")
        and all(getattr(kind, n) is getattr(tuple, n) for n in ("__eq__", "__ne__", "__hash__"))
    ):
        return tuple(value)
    return None


def make_frames(read, write):
    """Length-prefixed frames over pipes: 8 bytes little-endian size, then the bytes."""
    from_bytes = int.from_bytes

    def send(fd, payload):
        data = memoryview(len(payload).to_bytes(8, "little") + payload)
        while data:
            data = data[write(fd, data) :]

    def read_exactly(fd, size):
        chunks, left = [], size
        while left:
            chunk = read(fd, min(left, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def receive(fd):
        head = read_exactly(fd, 8)
        if head is None:
            return None
        return read_exactly(fd, from_bytes(head, "little"))

    return send, read_exactly, receive


def format_traceback(error, sources):
    """The traceback of ``error`` restricted to frames of the named sources."""
    out = ["Traceback (most recent call last):\n"]
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        lines = sources.get(code.co_filename)
        if lines is not None:
            out.append(
                '  File "%s", line %d, in %s\n' % (code.co_filename, tb.tb_lineno, code.co_name)
            )
            if 0 < tb.tb_lineno <= len(lines):
                out.append("    " + lines[tb.tb_lineno - 1].strip() + "\n")
        tb = tb.tb_next
    detail = str(error)
    out.append(type(error).__name__ + (": " + detail if detail else "") + "\n")
    return "".join(out)[-8000:]


def offender(value, allowed=None):
    """The first part of ``value`` that is not plain data (``value`` itself if none is).

    ``allowed(part)`` tells parts that cross anyway (objects crossing by value). Walks
    without recursion and visits each container once (a list holding itself ends).
    """
    stack, seen = [value], set()
    while stack:
        part = stack.pop()
        kind = type(part)
        if kind in (list, tuple, set, frozenset, dict):
            if id(part) in seen:
                continue
            seen.add(id(part))
            stack.extend(part.items() if kind is dict else part)
            continue
        if kind in PLAIN_TYPES:
            continue
        if allowed is not None and allowed(part):
            if type(getattr(part, "__dict__", None)) is dict and id(part) not in seen:
                seen.add(id(part))
                stack.extend(part.__dict__.values())
            continue
        if as_plain(part, kind) is not None:
            stack.append(as_plain(part, kind))
            continue
        return part
    return value


def describe_refusal(value):
    """Why a result is not plain data, and whether that looks like a hack.

    A hack is an object that would decide a comparison on the tests' side: a subclass of
    a plain type (``str``...), or an object whose class defines its own comparisons
    (``__eq__`` always true). Any other object (a ``re.Match``, a generator, an object of
    a class of the solution that compares by identity) is not plain data, but no hack.
    """
    kind = type(value)
    if kind in PLAIN_TYPES:
        return False, "data nested deeper than %d levels (or referring to itself)" % MAX_DEPTH
    for base in (str, bytes, int, float, complex, list, tuple, set, frozenset, dict):
        if issubclass(kind, base):
            return True, "a %s (a subclass of %s) in place of plain data" % (
                kind.__name__,
                base.__name__,
            )
    overridden = [
        name
        for name in ("__eq__", "__ne__", "__hash__", "__lt__", "__gt__", "__le__", "__ge__")
        if getattr(kind, name, None) is not getattr(object, name, None)
    ]
    if overridden and kind.__module__ != "builtins":  # a bound method compares, harmlessly
        return True, "an object of its own class %s (overriding %s) in place of plain data" % (
            kind.__name__,
            ", ".join(overridden),
        )
    return False, "a %s, which is not plain data (%s)" % (kind.__name__, PLAIN)


BUILTINS = dict(vars(__builtins__) if not isinstance(__builtins__, dict) else __builtins__)
