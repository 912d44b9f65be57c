"""The published JSON Schema of execgym's generic task and rollout JSONL lines.

The schema files in ``schemas/`` are generated from the pydantic models in
:mod:`execgym.tasks.models`; regenerate them after changing a model with::

    python -m execgym.tasks.schema schemas/

and a test fails while they are out of date.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from execgym.tasks.models import Rollout, Task

SCHEMA_FILES: dict[str, type[Task] | type[Rollout]] = {
    "task.schema.json": Task,
    "rollout.schema.json": Rollout,
}
"""File name -> the model it describes."""

_DRAFT = "https://json-schema.org/draft/2020-12/schema"


def schema_of(model: type[Task] | type[Rollout]) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one JSONL line validated by ``model``."""
    schema = model.model_json_schema(mode="validation")
    return {"$schema": _DRAFT, "$id": f"execgym/{model.__name__.lower()}", **schema}


def render(model: type[Task] | type[Rollout]) -> str:
    """The schema as the text stored in the repository (sorted keys, 2-space indent)."""
    return json.dumps(schema_of(model), indent=2, sort_keys=True) + "\n"


def write_schemas(directory: Path) -> list[Path]:
    """Write every schema file into ``directory``; return the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, model in SCHEMA_FILES.items():
        path = directory / name
        path.write_text(render(model), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for written_path in write_schemas(Path(sys.argv[1] if len(sys.argv) > 1 else "schemas")):
        print(written_path)
