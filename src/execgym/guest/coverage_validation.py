"""Runs INSIDE the sandbox: run a program under coverage.py and print its JSON report.

stdin: a JSON object ``{"site": dir, "source": program}``. ``dir`` holds the
``coverage`` package, bound read-only into the sandbox (the interpreter runs with
``-I -S``, so it is put on ``sys.path`` here). The program is written to
``/work/solution.py`` (the sandbox's private tmpfs) and run with line and branch
measurement; stdout ends with one JSON line: coverage.py's per-file report for it plus
``"error"``, the exception the program raised (``""`` if none).
"""

import json
import os
import sys


def main():
    job = json.loads(sys.stdin.read())
    sys.path.insert(0, job["site"])
    import coverage

    path = os.path.join(os.getcwd(), "solution.py")
    with open(path, "w", encoding="utf-8") as sink:
        sink.write(job["source"])
    cov = coverage.Coverage(data_file=None, branch=True, include=[path], config_file=False)
    namespace = {"__name__": "solution"}
    error = ""
    cov.start()
    try:
        exec(compile(job["source"], path, "exec"), namespace)
    except BaseException as raised:
        error = type(raised).__name__ + ": " + str(raised)[:500]
    finally:
        cov.stop()
    report = os.path.join(os.getcwd(), "coverage.json")
    cov.json_report(outfile=report)
    with open(report, encoding="utf-8") as source:
        files = json.load(source)["files"]
    data = next(iter(files.values()), {})
    data["error"] = error
    sys.stdout.write("\n" + json.dumps(data) + "\n")


main()
