r"""The agent's tools: their OpenAI function schemas, and actions parsed and checked.

An action is a tool call, in either of two shapes::

    {"tool": "read_file", "arguments": {"path": "pkg/mod.py"}}
    {"name": "read_file", "arguments": "{\"path\": \"pkg/mod.py\"}"}   # OpenAI's

(OpenAI's whole ``{"type": "function", "function": {...}}`` item is accepted too.)
:func:`parse_action` turns either into a :class:`ToolCall` or raises
:class:`ActionError` with what is wrong, which the environment answers with an
observation whose ``ok`` is false: a bad action never ends an episode.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MAX_COMMAND_TIMEOUT_S = 600.0
"""Longest ``timeout_s`` a ``run_command`` may ask for (the time budget bounds it too)."""


class ActionError(ValueError):
    """An action that is not a valid tool call; the message says how to fix it."""


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunCommand(_Arguments):
    """Run a shell command (bash) in the repository's root directory."""

    command: str = Field(min_length=1, description="The shell command, run with bash -c.")
    timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=MAX_COMMAND_TIMEOUT_S,
        allow_inf_nan=False,
        description="Seconds before the command is killed.",
    )


class ReadFile(_Arguments):
    """Read a text file of the repository."""

    path: str = Field(min_length=1, description="Path relative to the repository root.")


class WriteFile(_Arguments):
    """Create or overwrite a file of the repository with the given content."""

    path: str = Field(min_length=1, description="Path relative to the repository root.")
    content: str = Field(description="The file's whole new content.")


class ListDir(_Arguments):
    """List the entries of a directory of the repository."""

    path: str = Field(default=".", description="Directory relative to the repository root.")


class ApplyPatch(_Arguments):
    """Apply a unified diff (as made by git diff or diff -u) to the repository."""

    patch: str = Field(min_length=1, description="The unified diff.")


class RunTests(_Arguments):
    """Run the repository's visible tests with pytest."""


class Submit(_Arguments):
    """Submit the repository as it is now; the episode ends and is scored."""


TOOLS: dict[str, type[_Arguments]] = {
    "run_command": RunCommand,
    "read_file": ReadFile,
    "write_file": WriteFile,
    "list_dir": ListDir,
    "apply_patch": ApplyPatch,
    "run_tests": RunTests,
    "submit": Submit,
}
"""Every tool by name, with the pydantic model of its arguments."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A checked action: the tool's name and its validated arguments."""

    tool: str
    arguments: _Arguments


def _schema(model: type[_Arguments]) -> dict[str, Any]:
    schema = model.model_json_schema()
    properties = {
        name: {k: v for k, v in spec.items() if k != "title"}
        for name, spec in schema.get("properties", {}).items()
    }
    return {
        "type": "object",
        "properties": properties,
        "required": list(schema.get("required", [])),
        "additionalProperties": False,
    }


def tool_schemas() -> list[dict[str, Any]]:
    """The tools in OpenAI's function-calling format, to hand to a model.

    Returns:
        ``[{"type": "function", "function": {"name", "description", "parameters"}}]``,
        ``parameters`` being JSON Schema.
    """
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": (model.__doc__ or "").strip(),
                "parameters": _schema(model),
            },
        }
        for name, model in TOOLS.items()
    ]


def _name_and_arguments(action: Any) -> tuple[str, Any]:
    if not isinstance(action, dict):
        raise ActionError(
            f"an action is a JSON object like {{'tool': 'read_file', 'arguments': {{...}}}}, "
            f"not {type(action).__name__}"
        )
    if isinstance(action.get("function"), dict):  # OpenAI's {"type": "function", ...}
        action = action["function"]
    name = action.get("tool", action.get("name"))
    if not isinstance(name, str):
        raise ActionError("the action names no tool: give 'tool' (or OpenAI's 'name')")
    arguments = action.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as error:
            raise ActionError(f"{name}: arguments are not valid JSON ({error.msg})") from None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ActionError(f"{name}: arguments must be a JSON object")
    return name, arguments


def parse_action(action: Any) -> ToolCall:
    """Check an action and return it as a :class:`ToolCall`.

    Raises:
        ActionError: for an unknown tool, arguments that are not an object, or
            arguments that do not fit the tool's schema (each bad one named).
    """
    name, arguments = _name_and_arguments(action)
    model = TOOLS.get(name)
    if model is None:
        raise ActionError(f"unknown tool {name!r}; the tools are {sorted(TOOLS)}")
    try:
        return ToolCall(name, model.model_validate(arguments))
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
            for e in error.errors()
        )
        raise ActionError(f"{name}: bad arguments: {problems}") from None


def repo_path(path: str) -> str:
    """A path given by the agent, made relative to the repo root (``/work``).

    Raises:
        ActionError: for a path outside the repository (absolute elsewhere, ``..``).
    """
    if "\x00" in path:
        raise ActionError(f"path {path!r} has a NUL byte")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        if pure.parts[:2] != ("/", "work"):
            raise ActionError(f"path {path!r} is outside the repository (its root is /work)")
        pure = PurePosixPath(*pure.parts[2:]) if len(pure.parts) > 2 else PurePosixPath(".")
    if ".." in pure.parts:
        raise ActionError(f"path {path!r} leaves the repository: '..' is not allowed")
    return pure.as_posix()
