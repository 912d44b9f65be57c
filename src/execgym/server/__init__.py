"""The HTTP service (``execgym serve``): scoring, program runs, SandboxFusion's API.

Needs the ``server`` extra: ``pip install 'execgym[server]'``.
"""

from __future__ import annotations

try:
    from execgym.server.app import create_app
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        f"the execgym HTTP service needs the 'server' extra ({error.name} is missing): "
        "pip install 'execgym[server]'"
    ) from error
from execgym.server.settings import ServerSettings

__all__ = ["ServerSettings", "create_app"]
