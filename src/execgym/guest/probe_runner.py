"""Runs INSIDE the sandbox: call each program's entry point on given inputs, print reprs.

stdin: a JSON object ``{"programs": [source, ...], "entry_point": name, "calls":
[expression, ...], "call_time_s": seconds}``; each expression calls ``candidate``.
stdout: one JSON line, ``[[outcome per call] per program]``, where an outcome is the
``repr`` of the value (first 2000 characters) or ``"!raise <ExceptionType>"``; a
program that fails to load gives ``null``.
"""

import json
import signal
import sys


class CallTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise CallTimeout()


def _outcome(expression, namespace, seconds):
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return repr(eval(expression, namespace))[:2000]
    except BaseException as error:
        return "!raise " + type(error).__name__
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def main():
    job = json.loads(sys.stdin.read())
    signal.signal(signal.SIGALRM, _alarm)
    results = []
    for source in job["programs"]:
        namespace = {"__name__": "solution"}
        try:
            exec(compile(source, "solution.py", "exec"), namespace)
            namespace["candidate"] = namespace[job["entry_point"]]
        except BaseException:
            results.append(None)
            continue
        results.append([_outcome(c, namespace, job["call_time_s"]) for c in job["calls"]])
    sys.stdout.write("\n" + json.dumps(results) + "\n")


main()
