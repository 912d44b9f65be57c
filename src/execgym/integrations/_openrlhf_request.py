"""OpenRLHF's reward request body, in a module of its own.

OpenRLHF's file mode loads ``openrlhf.py`` by path as the module ``reward_func``
(``importlib.util.spec_from_file_location("reward_func", path)``, never put in
``sys.modules``); a pydantic model defined there cannot resolve its annotations
(``PydanticUserError: RewardRequest is not fully defined``), so it lives here, in a
module imported the ordinary way.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class RewardRequest(BaseModel):
    """OpenRLHF's request body (validated: this is a trust boundary).

    ``query``: prompt + response per sample; ``prompts``: the prompts (optional);
    ``labels``: each sample's ground truth (optional; same length as ``query``).
    """

    model_config = ConfigDict(extra="allow")
    query: list[str]
    prompts: list[str] = Field(default_factory=list)
    labels: list[Any] = Field(default_factory=list)

    @model_validator(mode="after")
    def _same_lengths(self) -> RewardRequest:
        if self.labels and len(self.labels) != len(self.query):
            raise ValueError(f"{len(self.query)} queries but {len(self.labels)} labels")
        if self.prompts and len(self.prompts) != len(self.query):
            raise ValueError(f"{len(self.query)} queries but {len(self.prompts)} prompts")
        return self
