"""SWE-bench-style instances and predictions as execgym tasks and rollouts.

An instance (one line of a SWE-bench, SWE-Gym or SWE-smith JSONL file) carries
``instance_id``, ``repo`` (``owner/name``), ``base_commit``, ``patch`` (the gold fix),
``test_patch`` (the tests the fix added), ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` (pytest
node ids, as lists or as the JSON-encoded strings the SWE-bench dataset on the Hugging
Face Hub stores), ``problem_statement``, and here two more fields: ``snapshot`` (the
repository's files at ``base_commit``: a directory or a tarball, as a path or
``file://`` URI; relative paths are read from the working directory, or from the
instance file's directory when loaded with :func:`execgym.episodes.swe.load_instances`)
and ``environment`` (or ``image``: an environment name or digest from
``execgym env import``/``build``, or an inline spec, see :mod:`execgym.environments`).

:func:`task_from_instance` turns one into a :class:`~execgym.tasks.models.Task` of kind
``swe``; a prediction (``instance_id``, ``model_patch``, ``model_name_or_path``) is read
as a rollout whose completion is the patch (:func:`rollout_from_prediction`). Both
conversions also happen when such lines are validated as tasks or rollouts, so
``execgym score --tasks instances.jsonl --rollouts predictions.jsonl`` scores them as the
SWE-bench harness does (:mod:`execgym.episodes.swe`).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

SWE_FIELDS = ("instance_id", "FAIL_TO_PASS", "test_patch")
"""Fields whose presence marks a JSON object as a SWE-bench-style instance."""


def _node_ids(value: Any) -> Any:
    """A list of node ids from a list or a JSON-encoded list (SWE-bench's Hub format)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(
                "must be a list of pytest node ids or a JSON-encoded list of them"
            ) from None
    return value


class SweFields(BaseModel):
    """What a ``swe`` task holds besides its id, prompt and environment.

    Attributes:
        repo: The project, ``owner/name`` (for people; nothing is fetched).
        base_commit: The commit the snapshot holds.
        snapshot: The repository's files at ``base_commit`` (directory or tarball).
        test_patch: The unified diff that adds the hidden tests (applied after the
            model's patch, over the base commit's test files).
        fail_to_pass: Node ids that fail at ``base_commit`` and pass with the fix.
        pass_to_pass: Node ids that pass at ``base_commit`` and with the fix.
        gold_patch: The project's own fix (``patch``), if known; never shown to the model.
        test_args: More pytest arguments of the test run (SWE-bench keeps a test command
            per repository; e.g. ``["-o", "pythonpath=src"]`` for a ``src`` layout).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str = ""
    base_commit: str = ""
    snapshot: str = Field(min_length=1)
    test_patch: str = Field(min_length=1)
    fail_to_pass: list[str] = Field(default_factory=list)
    pass_to_pass: list[str] = Field(default_factory=list)
    gold_patch: str | None = None
    test_args: list[str] = Field(default_factory=list)

    @field_validator("fail_to_pass", "pass_to_pass", mode="before")
    @classmethod
    def _decoded(cls, value: Any) -> Any:
        return _node_ids(value)


def is_instance(data: Any) -> bool:
    """Whether ``data`` is a SWE-bench-style instance (not yet an execgym task)."""
    return isinstance(data, dict) and all(name in data for name in SWE_FIELDS)


def task_from_instance(data: dict[str, Any]) -> dict[str, Any]:
    """The ``swe`` task (as the dict :class:`~execgym.tasks.models.Task` validates).

    Raises:
        ValueError: naming a missing field (``snapshot``, ``test_patch``...).
    """
    missing = [name for name in ("snapshot", "test_patch") if not data.get(name)]
    if missing:
        raise ValueError(
            f"SWE instance {data.get('instance_id')!r} lacks {missing}: give 'snapshot' "
            "(the repository's files at base_commit, a directory or tarball) and 'test_patch'"
        )
    environment = data.get("environment", data.get("image"))
    task: dict[str, Any] = {
        "task_id": data["instance_id"],
        "kind": "swe",
        "prompt": data.get("problem_statement") or f"Fix the failing tests of {data['repo']}.",
        "environment": environment,
        "swe": {
            "repo": data.get("repo", ""),
            "base_commit": data.get("base_commit", ""),
            "snapshot": data["snapshot"],
            "test_patch": data["test_patch"],
            "fail_to_pass": data.get("FAIL_TO_PASS", []),
            "pass_to_pass": data.get("PASS_TO_PASS", []),
            "gold_patch": data.get("patch"),
            "test_args": data.get("test_args", []),
        },
    }
    for name in ("limits", "reference"):
        if name in data:
            task[name] = data[name]
    return task


def rollout_from_prediction(data: Any) -> Any:
    """A SWE-bench prediction (``instance_id``, ``model_patch``) as a rollout dict.

    Anything else is returned unchanged. ``model_name_or_path`` becomes part of the
    rollout id (``"<instance_id>#<model>"``) unless a ``rollout_id`` is given.
    """
    if not (isinstance(data, dict) and "model_patch" in data and "instance_id" in data):
        return data
    rollout = {k: v for k, v in data.items() if k not in ("instance_id", "model_patch")}
    rollout.setdefault("task_id", data["instance_id"])
    rollout.setdefault("completion", data["model_patch"] or "")
    model = data.get("model_name_or_path")
    if model and "rollout_id" not in rollout:
        rollout["rollout_id"] = f"{data['instance_id']}#{model}"
    return rollout
