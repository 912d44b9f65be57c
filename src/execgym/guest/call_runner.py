"""The function-call harness, run INSIDE the sandbox: the harness and the solution apart.

Protocol:

1. It writes ``START_MARKER`` to fd 3 (the report channel) and makes itself
   non-dumpable before any untrusted code exists.
2. stdin holds the job in two parts, each a 10-digit length then that many bytes. Part
   one, ``<fn_name>\\n<program>``, is the solution. The harness reads only part one and
   forks the **solution process** (:func:`fork_untrusted`: no report channel, stdin
   ``/dev/null``), which runs the program and finds ``fn_name`` (a top-level function;
   else a method of ``class Solution``, a fresh instance per case; ``"Class.method"``
   names one). Only then does the harness read part two, ``<nonce> <case time limit in
   ms, 0 for none> <state>\\n<cases>``, the cases being plain data (``[(args, kwargs), ...]``),
   so the nonce and the cases never exist in the solution's memory.
3. With state ``fresh`` (the default), every case is served by a fork of the solution's
   process taken after the import, so no state carries from one case to the next;
   ``shared`` serves them all from one process. For each case it sends the arguments
   over the pipe and gets the result back as plain data
   (:mod:`execgym.guest.plain_data`), decoded into fresh builtin objects. The
   solution's process arms a ``SIGALRM`` timer per call; should it not answer within
   the limit plus 0.5 s anyway (it disarmed the timer, or is stuck in C code), the
   harness kills it, and that case and every later one are timeouts.
4. It writes one report to fd 3: the nonce on a line, then a JSON object ``{"status":
   "ok", "state": "fresh" | "shared", "results": [...]}`` with per case ``{"value":
   <JSON>}``, ``{"error": type, "message": ...}`` or ``{"timeout": true}``;
   ``{"status": "load_error" | "not_found", "error", "message"}``; or ``{"status":
   "tampered", "hack", "message"}`` when the solution answered with something that
   is not plain data in a way that looks like a hack (an object whose ``__eq__``
   always says yes, a ``str`` subclass) or forged an answer on the pipe.

The JSON is written by the harness's own encoder from exact builtin types (``None``,
``bool``, ``int``, ``float``, ``str``, lists, tuples and dicts of them); the comparison
with the expected values happens outside the sandbox.
"""

import os
import sys

from .boundary import CaseTimeout, Remote, SolutionAborted, Tampered
from .plain_data import PLAIN, make_codec, make_frames
from .untrusted import END_WAIT_S, Solution, make_non_dumpable, read_part

START_MARKER = b"EXECGYM-START\n"


def json_encoder():
    """``encode(value)``: JSON text of plain data, ``TypeError`` for anything else."""
    type_of, text, infinity = type, str, float("inf")
    int_repr, float_repr, join = int.__repr__, float.__repr__, ", ".join
    escapes = {i: "\\u%04x" % i for i in range(32)}
    escapes.update({ord('"'): '\\"', ord("\\"): "\\\\"})

    def string(value):
        return '"' + text.translate(text(value), escapes) + '"'

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
            if value != value:
                return "NaN"
            if value in (infinity, -infinity):
                return "Infinity" if value > 0 else "-Infinity"
            return float_repr(value)
        if kind is text:
            return string(value)
        if kind is list or kind is tuple:
            return "[" + join([encode(item, depth + 1) for item in value]) + "]"
        if kind is dict:
            parts = []
            for key, item in value.items():
                if type_of(key) is text:
                    name = key
                elif type_of(key) is int:
                    name = int_repr(key)
                else:
                    raise TypeError("a result dict key is of type " + type_of(key).__name__)
                parts.append(string(name) + ": " + encode(item, depth + 1))
            return "{" + join(parts) + "}"
        raise TypeError("the result is a " + kind.__name__ + ", not plain data (JSON)")

    return encode, string


def described(error):
    """(type name, message) of an exception: the solution's own when it was rebuilt."""
    origin = getattr(error, "execgym_solution", None)
    return origin[:2] if origin is not None else (type(error).__name__, str(error))


def run_cases(solution, cases, limit_s, encode, string):
    """Each case's result as a JSON object's text; ``None`` at once on a hack."""

    def failure(name, message):
        return '{"error": ' + string(name) + ', "message": ' + string(message[:2000]) + "}"

    results = []
    for args, kwargs in cases:
        try:
            value = solution.call(args, kwargs, limit_s)
            if type(value) is Remote:  # an object that is not plain data, but no hack
                why = "the solution returned a %s, which is not plain data (%s)"
                results.append(failure("UnsupportedResult", why % (value._kind, PLAIN)))
                continue
            results.append('{"value": ' + encode(value) + "}")
        except CaseTimeout:
            results.append('{"timeout": true}')
        except Tampered:
            return None
        except SolutionAborted:
            verdict, name, message = solution.problem[:3]
            if verdict == "timeout":
                results.append('{"timeout": true}')
                continue
            if name == "UnsupportedResult":  # a generator...: this case only, it lives on
                solution.problem = None
            results.append(failure(name, message))
        except BaseException as error:  # rebuilt from the solution's, or our encoder's
            results.append(failure(*described(error)))
    return results


def main():
    write, exit_now, read = os.write, os._exit, os.read
    write(3, START_MARKER)
    setup_error = make_non_dumpable()  # before the solution's process exists
    sys.set_int_max_str_digits(0)
    codec = make_codec()
    frames = make_frames(read, write)
    encode, string = json_encoder()
    nonce = b""

    def report(body):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        write(3, nonce + b"\n" + body.encode("utf-8", "backslashreplace") + b"\n")
        exit_now(0)

    def status(kind, name, message, field="error"):
        fields = '"%s": %s, "message": %s' % (field, string(name), string(message[:2000]))
        report('{"status": "%s", %s}' % (kind, fields))

    fn_name, _, program = read_part(frames[1]).partition(b"\n")
    fn_name = fn_name.decode("utf-8")
    solution = Solution(program.decode("utf-8", "replace"), fn_name, codec, frames)
    del program
    header, _, rest = read_part(frames[1]).partition(b"\n")
    nonce, limit_ms, state = header.split(b" ")
    cases = codec[1](rest)
    del rest, header
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    sys.stdin = open(os.devnull)
    if setup_error is not None:
        report('{"harness_error": %s}' % string(repr(setup_error)))
    try:
        solution.load(fresh=True, fresh_state=state == b"fresh")
    except Tampered:
        status("tampered", solution.problem[4], solution.problem[2], field="hack")
    except SolutionAborted:
        if solution.problem[1] == "NameError":
            message = "no function or Solution method named " + fn_name
            status("not_found", "EntryPointNotFound", message)
        status("load_error", solution.problem[1], solution.problem[2])
    except BaseException as error:
        status("load_error", *described(error))
    results = run_cases(solution, cases, int(limit_ms) / 1000, encode, string)
    if results is None:
        status("tampered", solution.problem[4], solution.problem[2], field="hack")
    solution.finish(END_WAIT_S)  # it leaves first: the run's process count is the same each time
    state = '"fresh"' if state == b"fresh" else '"shared"'
    report('{"status": "ok", "state": %s, "results": [%s]}' % (state, ", ".join(results)))


main()
