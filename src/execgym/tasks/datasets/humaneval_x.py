r"""HumanEval-X (CodeGeeX): HumanEval's 164 tasks in Python, C++, Java, JavaScript, Go and Rust.

Source: Zheng et al. 2023, "CodeGeeX: A Pre-Trained Model for Code Generation with
Multilingual Evaluations on HumanEval-X", https://github.com/THUDM/CodeGeeX, Apache-2.0
(``execgym/data/humaneval-x/``: SOURCE.md, LICENSE). Derived from OpenAI HumanEval (MIT).

Each language becomes an ``assert`` task whose program is built as CodeGeeX's own
harness (``codegeex/benchmark/execution.py``) builds it, with these changes, each needed
because the upstream harness relies on something that is not there offline or that
does not fail a test:

- Python: the test's trailing ``check(<fn>)`` call is dropped (our harness calls
  ``check(entry_point)`` itself); the entry point is the name that call passes.
- C++: the include lines CodeGeeX's ``IMPORT_HELPER`` adds go before the prompt.
- JavaScript: ``console.assert`` only prints in Node, so a failing test would pass; the
  tests run with a ``console.assert`` that throws.
- Go: upstream runs ``go test`` with ``testify``, which is not available offline; the
  tests (which only use ``assert.New(t)`` and ``Equal``) run from a generated ``main``
  against a small stand-in whose ``Equal`` compares as testify's ``ObjectsAreEqual``
  does (``reflect.DeepEqual``, ``bytes.Equal`` for ``[]byte``) and which exits 1 after
  the test if any comparison failed.
- Rust: upstream runs ``cargo test`` in a project with the crates ``rand``, ``regex``
  and ``md5``; here the test module's functions are called from a generated ``main``
  compiled by ``rustc``, the three crate imports are dropped from the declaration, and a
  task whose code or tests use one of those crates is skipped (masked) with the reason.
"""

from __future__ import annotations

import os
import re
from typing import Any

from execgym.errors import TaskError
from execgym.tasks.datasets._files import Loaded, data_path, read_records
from execgym.tasks.models import Task

LANGUAGES = {
    "python": "python",
    "cpp": "cpp",
    "java": "java",
    "js": "javascript",
    "go": "go",
    "rust": "rust",
}
"""HumanEval-X file suffix -> our language name."""

_CPP_HELPERS = (
    "#include<stdlib.h>",
    "#include<algorithm>",
    "#include<math.h>",
    "#include<stdio.h>",
    "#include<vector>",
    "#include<string>",
    "#include<climits>",
    "#include<cstring>",
    "#include<iostream>",
)
_GO_HELPERS = (
    "math",
    "strings",
    "fmt",
    "strconv",
    "time",
    "bytes",
    "regexp",
    "sort",
    "math/rand",
    "crypto/md5",
)
_JS_THROWING_ASSERT = (
    "console.assert = (ok, ...message) => {\n"
    "  if (!ok) {\n"
    "    throw new Error(['Assertion failed', ...message].join(' '));\n"
    "  }\n"
    "};\n"
)
_GO_ASSERT = """
type execgymAssertions struct{}

var execgymFailures = 0

type execgymAssertPackage struct{}

var assert = execgymAssertPackage{}

func (execgymAssertPackage) New(t *testing.T) execgymAssertions { return execgymAssertions{} }

func (execgymAssertions) Equal(expected, actual interface{}, msg ...interface{}) bool {
    exp, okE := expected.([]byte)
    act, okA := actual.([]byte)
    equal := false
    if okE && okA {
        equal = (exp == nil) == (act == nil) && string(exp) == string(act)
    } else {
        equal = reflect.DeepEqual(expected, actual)
    }
    if !equal {
        execgymFailures++
        message := "Error: Not equal:\\nexpected: %#v\\nactual  : %#v\\n"
        os.Stderr.WriteString(fmt.Sprintf(message, expected, actual))
    }
    return equal
}
"""
_GO_IMPORT_BLOCK = re.compile(r"import\s*\((.*?)\)", re.S)
_GO_IMPORT_LINE = re.compile(r'^\s*import\s+("[^"]+")', re.M)
_RUST_CRATE_USE = re.compile(r"^use (rand|regex|md5)\b[^;]*;\n?", re.M)
_RUST_CRATE_PATH = re.compile(r"\b(rand|regex|md5)::|\bRegex\b|\bRng\b|\bmd5\b")
_PY_CHECK_CALL = re.compile(r"^check\((\w+)\)\s*$", re.M)


def _python(record: dict[str, Any]) -> Task:
    calls = _PY_CHECK_CALL.findall(record["test"])
    return Task(
        task_id=record["task_id"],
        prompt=record["prompt"],
        tests=_PY_CHECK_CALL.sub("", record["test"]),
        entry_point=calls[-1],
        reference=record["canonical_solution"],
    )


def _cpp(record: dict[str, Any]) -> Task:
    prompt = record["prompt"]
    setup = "".join(line + "\n" for line in _CPP_HELPERS if line not in prompt)
    return Task(
        task_id=record["task_id"],
        language="cpp",
        prompt=setup + prompt,
        tests=record["test"],
        reference=record["canonical_solution"],
    )


def _java(record: dict[str, Any]) -> Task:
    return Task(
        task_id=record["task_id"],
        language="java",
        prompt=record["prompt"],
        tests=record["test"],
        reference=record["canonical_solution"],
    )


_JS_REFERENCE_FIXES = {
    # Wrong references that upstream never caught: its console.assert only logs in Node.
    # reverse_delete returns (z, false), the comma operator's false, not [t, false].
    "JavaScript/112": (
        "    return (z, false)\n  }\n  return (z, true)\n",
        "    return [t, false]\n  }\n  return [t, true]\n",
    ),
    # even_odd_count(0) is [1, 0] (one even digit, as HumanEval's reference counts it).
    "JavaScript/155": (
        "  if (num < 0) { num = -num }\n",
        "  if (num < 0) { num = -num }\n  if (num == 0) { return [1, 0] }\n",
    ),
    # string_to_md5 requires the npm package js-md5; Node's own crypto gives the same hash.
    "JavaScript/162": (
        "  var md5 = require('js-md5')\n  return md5(text)\n",
        "  return require('crypto').createHash('md5').update(text).digest('hex')\n",
    ),
}
"""Corrections of wrong JavaScript references (never of tests): ``{task_id: (old, new)}``."""


def _fixed(fixes: dict[str, tuple[str, str]], task_id: str, reference: str) -> str:
    if task_id not in fixes:
        return reference
    old, new = fixes[task_id]
    if old not in reference:  # the data file is checksummed: only an edited copy
        raise TaskError(f"{task_id}: its reference is not the shipped one")
    return reference.replace(old, new)


def _javascript(record: dict[str, Any]) -> Task:
    return Task(
        task_id=record["task_id"],
        language="javascript",
        prompt=record["prompt"],
        tests=_JS_THROWING_ASSERT + record["test"],
        reference=_fixed(_JS_REFERENCE_FIXES, record["task_id"], record["canonical_solution"]),
    )


def _go_imports(block: str) -> list[str]:
    found = [m for b in _GO_IMPORT_BLOCK.findall(block) for m in re.findall(r'"[^"]+"', b)]
    return found + _GO_IMPORT_LINE.findall(block)


_GO_USES = {
    "fmt": "fmt.Sprint",
    "math": "math.Abs",
    "strings": "strings.Compare",
    "sort": "sort.Ints",
    "strconv": "strconv.Itoa",
    "math/rand": "rand.Int",
    "time": "time.Now",
    "regexp": "regexp.MustCompile",
    "bytes": "bytes.Compare",
    "crypto/md5": "md5.Sum",
}
"""A use of each package the Go test setups import: Go refuses an unused import, and
upstream's test file (``go test``) used them, so a solution that does not (Go/158's
reference and ``strings``, Go/160's and ``math/rand``) must still compile."""


def go_program_parts(record: dict[str, Any]) -> tuple[str, str]:
    """``(prompt, tests)`` of a HumanEval-X Go task, runnable without ``go test``.

    The prompt is ``package main``, the imports (the test setup's, without testify, plus
    any of CodeGeeX's helper packages the reference uses, plus what the stand-in needs)
    and the prompt without its own import block; the tests are the stand-in ``assert``,
    the test function and a ``main`` that calls it.
    """
    prompt = record["prompt"].replace(record["import"], "")
    wanted = [p for p in _go_imports(record["test_setup"]) if "testify" not in p]
    used = record["canonical_solution"] + prompt
    wanted += [f'"{p}"' for p in _GO_HELPERS if p.split("/")[-1] + "." in used]
    wanted += ['"fmt"', '"os"', '"reflect"', '"testing"']
    imports = "".join(f"    {name}\n" for name in dict.fromkeys(wanted))
    packages = [name.strip('"') for name in dict.fromkeys(wanted)]
    uses = "".join(f"var _ = {_GO_USES[name]}\n" for name in packages if name in _GO_USES)
    header = f"package main\n\nimport (\n{imports})\n\n{uses}"
    test = record["test"]
    name = re.search(r"func (Test\w+)\(", test)
    if name is None:  # every Go test in the shipped file has one (checked by a test)
        raise TaskError(f"{record['task_id']}: its test defines no func Test...")
    main = (
        f"\nfunc main() {{\n    {name.group(1)}(&testing.T{{}})\n"
        "    if execgymFailures > 0 {\n        os.Exit(1)\n    }\n}\n"
    )
    return header + prompt, _GO_ASSERT + test + main


_GO_REFERENCE_FIXES = {
    # check_dict_case: after two keys of the same case the reference leaves the loop
    # (`else { break }`), so whether {"p", "A", "B"} is mixed depends on Go's randomised
    # map order: wrong in some orders (upstream's `go test` passed by chance).
    "Go/95": (
        '            state = "mixed"\n            break\n        } else {\n'
        "            break\n        }\n",
        '            state = "mixed"\n            break\n        }\n',
    ),
}
"""Corrections of Go references that are wrong (not of tests): ``{task_id: (old, new)}``."""


def _go(record: dict[str, Any]) -> Task:
    prompt, tests = go_program_parts(record)
    reference = _fixed(_GO_REFERENCE_FIXES, record["task_id"], record["canonical_solution"])
    return Task(
        task_id=record["task_id"],
        language="go",
        prompt=prompt,
        tests=tests,
        reference=reference,
    )


def _rust_crates(record: dict[str, Any]) -> list[str]:
    code = _strip_rust_comments(record["canonical_solution"] + record["test"])
    return sorted({m.group(1) or m.group(0).lower() for m in _RUST_CRATE_PATH.finditer(code)})


def _strip_rust_comments(code: str) -> str:
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", code, flags=re.S))


def _rust(record: dict[str, Any]) -> Task:
    declaration = _RUST_CRATE_USE.sub("", record["declaration"])
    tests = re.sub(r"#\[cfg\(test\)\]\s*", "", record["test"])
    names = re.findall(r"#\[test\]\s*fn (\w+)", _strip_rust_comments(tests))
    tests = re.sub(r"#\[test\]\s*fn ", "pub fn ", tests)
    calls = "".join(f"    tests::{name}();\n" for name in names)
    prelude = "#![allow(unused, deprecated)]\n"
    return Task(
        task_id=record["task_id"],
        language="rust",
        prompt=prelude + record["prompt"] + declaration,
        tests=tests + f"\nfn main() {{\n{calls}}}\n",
        reference=record["canonical_solution"],
    )


_BUILDERS = {
    "python": _python,
    "cpp": _cpp,
    "java": _java,
    "js": _javascript,
    "go": _go,
    "rust": _rust,
}


def _cpp_missing(record: dict[str, Any]) -> str:
    """Why a C++ task cannot be judged here (``""`` when it can)."""
    code = record["prompt"] + record["canonical_solution"] + record["test"]
    if "boost/" in code and not any(
        os.path.exists(os.path.join(d, "boost", "any.hpp")) for d in _INCLUDE_DIRS
    ):
        return "needs Boost's headers, which are not installed: apt-get install libboost-dev"
    if "openssl/" in code:
        return (
            "needs OpenSSL's libcrypto (-lcrypto), which upstream links and execgym's C++ "
            "compile step does not"
        )
    return ""


_INCLUDE_DIRS = ("/usr/include", "/usr/local/include")


def load_humaneval_x(language: str) -> Loaded:
    """HumanEval-X in one language (``python``, ``cpp``, ``java``, ``js``, ``go``, ``rust``).

    Raises:
        TaskNotFound: if the data file is missing.
        KeyError: if ``language`` is not one of them.
    """
    build = _BUILDERS[language]
    tasks: dict[str, Task] = {}
    skipped: dict[str, str] = {}
    references: dict[str, str] = {}
    for record in read_records(data_path("humaneval-x", f"humaneval_{language}.jsonl.gz")):
        task = build(record)
        missing = _cpp_missing(record) if language == "cpp" else ""
        if missing:
            skipped[task.task_id] = missing
            references[task.task_id] = record["canonical_solution"]
            continue
        crates = _rust_crates(record) if language == "rust" else []
        if crates:
            skipped[task.task_id] = (
                f"needs the Rust crate(s) {', '.join(crates)}, which are not available "
                "offline (upstream builds a Cargo project with them vendored)"
            )
            references[task.task_id] = record["canonical_solution"]
            continue
        tasks[task.task_id] = task
    return Loaded(tasks, skipped, references)
