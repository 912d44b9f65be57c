"""The function-call harness, run INSIDE the sandbox (standard library only).

Protocol:

1. It writes ``START_MARKER`` to fd 3 (the report channel) before any untrusted code
   exists in the process.
2. stdin holds a header line ``EXECGYM-CALL1 <nonce> <fn_name> <program bytes>
   <case time limit in ms, 0 for none>``, the program (UTF-8), then the cases as JSON
   (``[{"args": [...], "kwargs": {...}}, ...]``). Everything is read and parsed, and fd 0
   put on ``/dev/null``, before the program runs.
3. It executes the program, finds ``fn_name`` (a top-level function; else a method of
   ``class Solution``, a fresh instance per case; ``"Class.method"`` names one), calls
   it once per case and writes one report to fd 3: the nonce on a line, then a JSON
   object ``{"status": "ok", "results": [...]}`` with per case ``{"value": <JSON>}``,
   ``{"error": type, "message": ...}`` or ``{"timeout": true}``; or ``{"status":
   "load_error" | "not_found", "type", "message"}``.

Results are written by the harness's own encoder, which accepts only exact builtin
types (``None``, ``bool``, ``int``, ``float``, ``str``, and lists, tuples and dicts of
them): an object whose ``__eq__`` always says yes, or an ``int`` subclass, is reported
as an error, never as a value, and the comparison happens outside the sandbox. The
encoder and every name the report needs are bound before the program runs.
"""

import json
import os
import signal
import sys

START_MARKER = b"EXECGYM-START\n"


class CaseTimeout(BaseException):
    pass


def main():
    write, exit_now, type_of, text = os.write, os._exit, type, str
    get_attr, is_callable, infinity = getattr, callable, float("inf")
    int_repr, float_repr, join = int.__repr__, float.__repr__, ", ".join
    exact_list, exact_tuple, exact_dict = list, tuple, dict
    isnan, streams, items = (lambda x: x != x), (sys.stdout, sys.stderr), dict.items
    set_timer, real_timer = signal.setitimer, signal.ITIMER_REAL
    write(3, START_MARKER)
    sys.set_int_max_str_digits(0)

    escapes = {i: "\\u%04x" % i for i in range(32)}
    escapes.update({ord('"'): '\\"', ord("\\"): "\\\\"})

    def string(value):
        return '"' + text.translate(value, escapes) + '"'

    def encode(value, depth=0):
        kind = type_of(value)
        if depth > 200:
            raise TypeError("the result is nested too deeply")
        if value is None:
            return "null"
        if kind is bool:
            return "true" if value else "false"
        if kind is int:
            return int_repr(value)
        if kind is float:
            if isnan(value):
                return "NaN"
            if value in (infinity, -infinity):
                return "Infinity" if value > 0 else "-Infinity"
            return float_repr(value)
        if kind is text:
            return string(value)
        if kind is exact_list or kind is exact_tuple:
            return "[" + join([encode(item, depth + 1) for item in value]) + "]"
        if kind is exact_dict:
            parts = []
            for key, item in items(value):
                if type_of(key) is text:
                    name = key
                elif type_of(key) is int:
                    name = int_repr(key)
                else:
                    raise TypeError("a result dict key is of type " + type_of(key).__name__)
                parts.append(string(name) + ": " + encode(item, depth + 1))
            return "{" + join(parts) + "}"
        raise TypeError("the result is a " + kind.__name__ + ", not plain data (JSON)")

    def failure(error):
        return (
            '"error": '
            + string(type_of(error).__name__)
            + ', "message": '
            + string(text(error)[:2000])
        )

    def report(body):
        for stream in (*streams, sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        write(3, nonce + b"\n" + body.encode("utf-8", "backslashreplace") + b"\n")
        exit_now(0)

    def on_alarm(signum, frame):
        raise CaseTimeout()

    data = sys.stdin.buffer.read()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    sys.stdin = open(os.devnull)
    header, _, rest = data.partition(b"\n")
    _, nonce, fn_name, program_size, limit_ms = header.split(b" ")
    program_size, seconds = int(program_size), int(limit_ms) / 1000
    program = rest[:program_size].decode("utf-8", "replace")
    cases = json.loads(rest[program_size:])
    fn_name = fn_name.decode("utf-8")
    del data, rest, header
    signal.signal(signal.SIGALRM, on_alarm)
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(compile(program, "solution.py", "exec"), namespace)
    except BaseException as error:
        report('{"status": "load_error", ' + failure(error) + "}")

    owner, _, method = fn_name.rpartition(".")
    target = namespace.get(method) if not owner else None
    if target is None or type_of(target) is type:
        holder = namespace.get(owner or "Solution")
        target = None
        if type_of(holder) is type and is_callable(get_attr(holder, method, None)):
            target = holder
    else:
        holder = None
    if not is_callable(target):
        message = "no function or Solution method named " + fn_name
        report(
            '{"status": "not_found", "error": "EntryPointNotFound", "message": '
            + string(message)
            + "}"
        )

    results = []
    for case in cases:
        try:
            if seconds:
                set_timer(real_timer, seconds)
            function = get_attr(holder(), method) if holder is not None else target
            value = function(*case["args"], **case["kwargs"])
            if seconds:
                set_timer(real_timer, 0)
            results.append('{"value": ' + encode(value) + "}")
        except CaseTimeout:
            results.append('{"timeout": true}')
        except BaseException as error:
            if seconds:
                set_timer(real_timer, 0)
            results.append("{" + failure(error) + "}")
    report('{"status": "ok", "results": [' + join(results) + "]}")


main()
