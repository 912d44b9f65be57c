"""Plain data across a process boundary: the code both harnesses run INSIDE the sandbox.

Every Python harness script starts with this module's source, then
:mod:`execgym.judges._untrusted` (the solution's process and the harness's handle on
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
PLAIN = "None, bool, int, float, complex, str, bytes, list, tuple, set, frozenset, dict"


class Refused(Exception):
    """A value that is not plain data (encoding) or a malformed message (decoding)."""


def make_codec():
    """Encoder and decoder of plain data, bound to local names before any solution runs."""
    type_of, length, join = type, len, "".join
    NoneType = type(None)

    def encode(value, out, depth):
        kind = type_of(value)
        if depth > MAX_DEPTH:
            raise Refused("nested deeper than %d levels (or refers to itself)" % MAX_DEPTH)
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
        elif kind is list or kind is tuple or kind is set or kind is frozenset:
            tag = {list: "l", tuple: "t", set: "S", frozenset: "z"}[kind]
            out.append("%s%d:" % (tag, length(value)))
            for item in value:
                encode(item, out, depth + 1)
        elif kind is dict:
            out.append("d%d:" % length(value))
            for key, item in value.items():
                encode(key, out, depth + 1)
                encode(item, out, depth + 1)
        else:
            plain = as_plain(value, kind)
            if plain is None:
                raise Refused(kind)
            encode(plain, out, depth + 1)

    def dumps(value):
        out = []
        encode(value, out, 0)
        return join(out).encode("utf-8", "surrogatepass")

    def number(text, start, end_char):
        end = text.index(end_char, start)
        return text[start:end], end + 1

    def decode(text, at, depth):
        if depth > MAX_DEPTH:
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
                key, at = decode(text, at, depth + 1)
                result[key], at = decode(text, at, depth + 1)
            return result, at
        if tag not in ("l", "t", "S", "z"):
            raise Refused("unknown tag %r" % tag)
        items = []
        for _ in range(count):
            item, at = decode(text, at, depth + 1)
            items.append(item)
        return {"l": list, "t": tuple, "S": set, "z": frozenset}[tag](items), at

    def loads(data):
        try:
            text = data.decode("utf-8", "surrogatepass")
            value, end = decode(text, 0, 0)
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


def describe_refusal(value):
    """Why a result is not plain data, and whether that looks like a hack."""
    kind = type(value)
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
    if kind.__module__ == "solution" or overridden:
        what = ", ".join(overridden) or "its own methods"
        return True, "an object of its own class %s (overriding %s) in place of plain data" % (
            kind.__name__,
            what,
        )
    return False, "a %s, which is not plain data (%s)" % (kind.__name__, PLAIN)


BUILTINS = dict(vars(__builtins__) if not isinstance(__builtins__, dict) else __builtins__)
