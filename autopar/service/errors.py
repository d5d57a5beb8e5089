"""The service's error shape: FastAPI's own ({'detail': [{'loc', 'msg', 'type'}]}), in the CLI's words."""

from __future__ import annotations

from typing import Any


def error_body(message: str, field: str | None = None, where: str = "body") -> dict[str, Any]:
    """{'detail': [{'loc': [where, field], 'msg': message, 'type': 'value_error'}]}: one line naming the input."""
    return {"detail": [{"loc": [where, field] if field else [where], "msg": message, "type": "value_error"}]}
