"""Request bodies: read within a size limit, parse as a JSON object, validate against the
endpoint's pydantic model.

Every failure is an :class:`~agentgym.server.errors.ApiError`: ``body_too_large`` (413) when the
declared ``Content-Length`` or the bytes actually streamed exceed the limit, ``malformed_json``
(400) when the bytes are not JSON, ``invalid_request`` (422) when the JSON is not an object or a
field is missing or has the wrong type (the message and the error's ``field`` name it). Fields a
model does not declare are ignored.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError
from starlette.requests import Request

from agentgym.server.errors import ApiError

__all__ = ["CreateBody", "ParallelStepBody", "ResetBody", "StepBody", "parse_body", "read_object"]

Body = TypeVar("Body", bound=BaseModel)


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class CreateBody(_Body):
    """``POST /sessions``."""

    env_id: Annotated[StrictStr, Field(min_length=1, description="a non-empty string")]
    kwargs: dict[str, Any] | None = Field(None, description="an object or null")
    kind: Literal["single", "parallel"] | None = Field(None, description="'single', 'parallel' or null")


class ResetBody(_Body):
    """``POST /sessions/{id}/reset``: what Gymnasium's ``reset`` takes."""

    seed: Annotated[StrictInt, Field(ge=0)] | None = Field(None, description="a non-negative integer or null")
    options: dict[str, Any] | None = Field(None, description="an object or null")


class StepBody(_Body):
    """``POST /sessions/{id}/step`` of a single-agent session (text envs check the type)."""

    action: Any = Field(..., description="the action")


class ParallelStepBody(_Body):
    """``POST /sessions/{id}/step`` of a parallel session: an action per live agent."""

    actions: dict[str, Any] = Field(..., description="an object: agent name -> action")


async def read_object(request: Request, max_bytes: int) -> dict[str, Any]:
    """The body as a JSON object; an empty body counts as ``{}``."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise ApiError("invalid_request", f"bad Content-Length header {declared!r}")
        if int(declared) > max_bytes:
            raise ApiError(
                "body_too_large",
                f"the body has {int(declared)} bytes; the limit is {max_bytes} (max_body_bytes)",
                limit=max_bytes,
            )
    chunks, size = [], 0
    async for chunk in request.stream():  # also bounds chunked bodies that declare no length
        size += len(chunk)
        if size > max_bytes:
            raise ApiError(
                "body_too_large",
                f"the body exceeds the limit of {max_bytes} bytes (max_body_bytes)",
                limit=max_bytes,
            )
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
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def parse_body(model: type[Body], body: dict[str, Any]) -> Body:
    """``body`` validated as ``model``; ``invalid_request`` naming the first bad field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        name = str(error["loc"][0])
        got = "nothing" if error["type"] == "missing" else _kind(error["input"])
        raise ApiError(
            "invalid_request",
            f"field {name!r} must be "
            f"{model.model_fields[name].description} ({error['msg'].lower()}), got "
            f"{got}",
            field=name,
        ) from None
