"""Request bodies: read within a size limit, parse as a JSON object, validate fields.

Every failure is an :class:`~agentgym.server.errors.ApiError`: ``body_too_large`` (413) when the
declared ``Content-Length`` or the bytes actually streamed exceed the limit, ``malformed_json``
(400) when the bytes are not JSON, ``invalid_request`` (422) when the JSON is not an object or a
field is missing or has the wrong type.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from agentgym.server.errors import ApiError

__all__ = ["optional_object", "optional_seed", "read_object", "required_object", "required_str"]


async def read_object(request: Request, max_bytes: int) -> dict[str, Any]:
    """The body as a JSON object; an empty body counts as ``{}``."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise ApiError("invalid_request", f"bad Content-Length header {declared!r}")
        if int(declared) > max_bytes:
            raise ApiError("body_too_large", f"the body has {int(declared)} bytes; the limit is "
                           f"{max_bytes} (max_body_bytes)", limit=max_bytes)
    chunks, size = [], 0
    async for chunk in request.stream():  # also bounds chunked bodies that declare no length
        size += len(chunk)
        if size > max_bytes:
            raise ApiError("body_too_large", f"the body exceeds the limit of {max_bytes} bytes "
                           "(max_body_bytes)", limit=max_bytes)
        chunks.append(chunk)
    body = b"".join(chunks)
    if not body.strip():
        return {}
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError
        raise ApiError("malformed_json", f"the body is not valid JSON: {exc}"[:500]) from None
    if not isinstance(value, dict):
        raise ApiError("invalid_request", f"the body must be a JSON object, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")


def required_str(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise ApiError("invalid_request", f"field {name!r} must be a non-empty string, got "
                       + ("nothing" if name not in body else _kind(value)), field=name)
    return value


def optional_seed(body: dict[str, Any], name: str) -> int | None:
    """A non-negative integer (what Gymnasium accepts as a seed) or ``None``."""
    value = body.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < 0):
        shown = value if isinstance(value, int) and not isinstance(value, bool) else _kind(value)
        raise ApiError("invalid_request", f"field {name!r} must be a non-negative integer or "
                       f"null, got {shown}", field=name)
    return value


def optional_object(body: dict[str, Any], name: str) -> dict[str, Any] | None:
    value = body.get(name)
    if value is not None and not isinstance(value, dict):
        raise ApiError("invalid_request", f"field {name!r} must be an object or null, got "
                       f"{_kind(value)}", field=name)
    return value


def required_object(body: dict[str, Any], name: str) -> dict[str, Any]:
    value = body.get(name)
    if not isinstance(value, dict):
        raise ApiError("invalid_request", f"field {name!r} must be an object, got "
                       + ("nothing" if name not in body else _kind(value)), field=name)
    return value
