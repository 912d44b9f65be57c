"""MBPP, "Mostly Basic Python Problems": 974 tasks with three asserts each.

Source: Austin et al. 2021, "Program Synthesis with Large Language Models",
https://github.com/google-research/google-research/tree/master/mbpp, CC-BY-4.0
(``execgym/data/mbpp/``: SOURCE.md, LICENSE). Task ids 11-510 are the evaluation split;
1-10 and 511-974 are for training and few-shot prompts.

Each record becomes an ``assert`` task: the prompt is the task text and its first assert
in a docstring; the tests are ``test_setup_code`` and the three asserts of
``test_list`` inside ``check`` (they call the function by its name, as upstream); the
reference is ``code``, with its CRLF line ends made LF. ``challenge_test_list`` is not
used (upstream's evaluation does not use it either).
"""

from __future__ import annotations

from execgym.tasks.datasets._files import Loaded, data_path, read_records
from execgym.tasks.datasets.evalplus import _entry_point, mbpp_prompt
from execgym.tasks.models import Task


def mbpp_tests(setup: str, asserts: list[str], entry_point: str) -> str:
    """``check(candidate)`` running the asserts, which name the function themselves.

    The tests run in their own process and call the solution's function through
    ``candidate``, bound to the function's name inside ``check``; so a solution whose
    function is itself called ``check`` (tasks 56, 349, 899, 967) is still the one
    tested, not the test function.
    """
    body = "".join(f"    {line.strip()}\n" for line in asserts)
    return f"{setup.strip()}\n\ndef check(candidate):\n    {entry_point} = candidate\n{body}"


def load_mbpp() -> Loaded:
    """MBPP (974 tasks, ids ``"1"``..``"974"``; evaluation split 11-510).

    Raises:
        TaskNotFound: if the data file is missing.
    """
    tasks = {}
    for record in read_records(data_path("mbpp", "mbpp.jsonl.gz")):
        task_id = str(record["task_id"])
        code = record["code"].replace("\r\n", "\n")
        entry_point = _entry_point(code, record["test_list"])
        tasks[task_id] = Task(
            task_id=task_id,
            prompt=mbpp_prompt(record["text"], record["test_list"][0]),
            tests=mbpp_tests(record["test_setup_code"], record["test_list"], entry_point),
            entry_point=entry_point,
            reference=code,
        )
    return Loaded(tasks)
