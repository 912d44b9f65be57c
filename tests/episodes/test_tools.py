"""Tool schemas in OpenAI's format, actions in both shapes, and clear refusals."""

from __future__ import annotations

import json

import jsonschema
import pytest

from execgym.episodes import TOOLS, ActionError, parse_action, tool_schemas, truncate
from execgym.episodes.tools import ReadFile, RunCommand, repo_path


def test_schemas_are_openai_function_tools_and_valid_json_schema() -> None:
    schemas = tool_schemas()
    assert [s["function"]["name"] for s in schemas] == list(TOOLS)
    assert set(TOOLS) == {
        "run_command",
        "read_file",
        "write_file",
        "list_dir",
        "apply_patch",
        "run_tests",
        "submit",
    }
    for schema in schemas:
        assert schema["type"] == "function"
        assert set(schema["function"]) == {"name", "description", "parameters"}
        assert schema["function"]["description"]
        jsonschema.Draft202012Validator.check_schema(schema["function"]["parameters"])
    by_name = {s["function"]["name"]: s["function"]["parameters"] for s in schemas}
    jsonschema.validate({"command": "ls", "timeout_s": 5}, by_name["run_command"])
    assert by_name["run_command"]["required"] == ["command"]
    assert by_name["write_file"]["required"] == ["path", "content"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"path": "a", "mode": "w"}, by_name["read_file"])
    json.dumps(schemas)  # plain JSON


def test_both_action_shapes_parse_the_same() -> None:
    ours = parse_action({"tool": "run_command", "arguments": {"command": "ls", "timeout_s": 5}})
    openai = parse_action({"name": "run_command", "arguments": '{"command": "ls", "timeout_s": 5}'})
    item = parse_action(
        {"type": "function", "function": {"name": "run_command", "arguments": '{"command": "ls"}'}}
    )
    assert ours == openai
    assert ours.arguments == RunCommand(command="ls", timeout_s=5)
    assert item.arguments == RunCommand(command="ls")
    assert parse_action({"name": "submit", "arguments": ""}).tool == "submit"
    assert parse_action({"tool": "list_dir"}).arguments.path == "."


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ("ls", "JSON object"),
        ({"arguments": {}}, "names no tool"),
        ({"tool": "rm_rf", "arguments": {}}, "unknown tool 'rm_rf'"),
        ({"name": "read_file", "arguments": "{path: x}"}, "not valid JSON"),
        ({"tool": "read_file", "arguments": ["x"]}, "must be a JSON object"),
        ({"tool": "read_file", "arguments": {}}, "path: Field required"),
        ({"tool": "read_file", "arguments": {"path": "a", "x": 1}}, "x: Extra inputs"),
        ({"tool": "run_command", "arguments": {"command": "ls", "timeout_s": -1}}, "timeout_s"),
        ({"tool": "run_command", "arguments": {"command": "ls", "timeout_s": 1e9}}, "timeout_s"),
    ],
)
def test_bad_actions_say_what_is_wrong(action: object, message: str) -> None:
    with pytest.raises(ActionError, match=message):
        parse_action(action)


@pytest.mark.parametrize(
    ("path", "inside"),
    [("pkg/a.py", "pkg/a.py"), ("/work/pkg/a.py", "pkg/a.py"), ("/work", "."), ("./a", "a")],
)
def test_paths_are_relative_to_the_repo(path: str, inside: str) -> None:
    assert repo_path(path) == inside


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../../b", "/workx/a", "a\x00b"])
def test_paths_leaving_the_repo_are_refused(path: str) -> None:
    with pytest.raises(ActionError):
        repo_path(path)


def test_long_output_keeps_head_and_tail_around_a_marker() -> None:
    text, cut = truncate(b"a" * 100 + b"b" * 12345 + b"c" * 100, 200)
    assert cut
    assert text.startswith("a" * 100)
    assert text.endswith("c" * 100)
    assert "[... 12345 bytes truncated ...]" in text
    assert truncate("short", 200) == ("short", False)


def test_argument_models_are_frozen_values() -> None:
    assert ReadFile(path="a") == ReadFile(path="a")


def test_the_public_names_are_listed_and_importable() -> None:
    import execgym
    import execgym.episodes as episodes

    for name in episodes.__all__:
        assert hasattr(episodes, name), name
    assert execgym.make is episodes.make
    assert execgym.AsyncEnv is episodes.AsyncEnv
