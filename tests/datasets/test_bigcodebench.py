"""The BigCodeBench-Hard loader: splits, upstream's program, skipped tasks and why."""

from __future__ import annotations

import gzip
import json

import pytest

from execgym.judges.unittest_tests import unittest_program
from execgym.tasks.datasets import DATASETS, bigcodebench, load_builtin
from execgym.tasks.datasets._files import data_path

NAMES = ("bigcodebench-hard", "bigcodebench-hard-instruct")


def records() -> dict[str, dict]:
    path = data_path("bigcodebench-hard", "bigcodebench_hard.json.gz")
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


@pytest.mark.parametrize("name", NAMES)
def test_every_task_is_loaded_or_skipped_with_a_reason(name: str) -> None:
    loaded = load_builtin(name)
    assert DATASETS[name].tasks == 148
    assert len(loaded.tasks) + len(loaded.skipped) == 148
    assert set(loaded.references) == set(loaded.skipped)
    for task_id, why in bigcodebench.UNAVAILABLE.items():
        assert loaded.skipped[task_id] == why
    assert all(task.kind == "unittest" for task in loaded.tasks.values())


def test_the_reference_program_is_upstreams_ground_truth_in_both_splits() -> None:
    data = records()
    complete = load_builtin("bigcodebench-hard")
    instruct = load_builtin("bigcodebench-hard-instruct")
    for task_id, task in complete.tasks.items():
        record = data[task_id]
        upstream = record["complete_prompt"] + "\n" + record["canonical_solution"]
        assert unittest_program(task, task.reference or "") == upstream + "\n" + record["test"]
        assert task.prompt == task.solution_prefix == record["complete_prompt"]
        other = instruct.tasks[task_id]
        assert other.prompt == record["instruct_prompt"]
        assert other.solution_prefix == ""
        program = unittest_program(other, other.reference or "")
        assert program.lstrip("\n") == upstream + "\n" + record["test"]


def test_a_missing_library_skips_the_task_with_the_install_line(monkeypatch) -> None:
    monkeypatch.setattr(
        bigcodebench,
        "missing_modules",
        lambda names: [n for n in names if n in {"sklearn", "pandas"}],
    )
    record = records()["BigCodeBench/13"] | {"libs": "['pandas', 'sklearn', 'os']"}
    why = bigcodebench.why_unavailable(record)
    assert "imports pandas, sklearn" in why
    assert "pip install 'execgym[bigcodebench]' (or: pip install pandas scikit-learn)" in why


def test_tensorflow_tasks_say_the_extra_leaves_it_out(monkeypatch) -> None:
    monkeypatch.setattr(
        bigcodebench, "missing_modules", lambda names: [n for n in names if n == "tensorflow"]
    )
    why = bigcodebench.why_unavailable(records()["BigCodeBench/418"])
    assert "execgym[bigcodebench] leaves out" in why
    assert "pip install tensorflow" in why


def test_imports_are_parsed_not_read_from_docstrings() -> None:
    record = {
        "complete_prompt": (
            'import pandas as pd\ndef task_func():\n    """\n'
            '    import a\n    from the docs\n    """\n'
        ),
        "canonical_solution": (
            "    from sklearn.linear_model import LinearRegression\n    return 1\n"
        ),
        "test": "import unittest\nimport numpy.testing\nfrom . import x\n",
        "libs": "['os', 'pandas']",
    }
    assert bigcodebench.needed_modules(record) == ["pandas", "sklearn", "numpy"]


def test_an_unknown_split_is_refused() -> None:
    with pytest.raises(ValueError, match="use 'complete' or 'instruct'"):
        bigcodebench.load_bigcodebench_hard("chat")  # type: ignore[arg-type]
