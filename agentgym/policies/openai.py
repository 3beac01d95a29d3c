"""Any OpenAI-compatible chat completions endpoint as a policy (OpenAI, a vLLM server, ...).

:class:`OpenAIPolicy` sends each request's chat messages to ``POST {base_url}/chat/completions``
through httpx, so the server applies its own chat template; with several base URLs, a
:class:`~agentgym.policies.router.Router` spreads the requests among them. It is meant for
evaluation: token ids and logprobs are filled only where the server returns them (vLLM does
when asked through ``extra_body``, e.g. ``{"return_token_ids": true, "logprobs": true}``),
never re-tokenized.

The API key is read from the environment variable named by ``api_key_env`` when the policy is
made; it is sent as a Bearer token and appears nowhere else: not in the config, the repr, error
messages or logs.

:func:`served_models` and :func:`require_served` check any OpenAI-compatible server (vLLM's
too) before a run: one request, no retries. Not every OpenAI-compatible server lists its models,
or under the names it takes: :class:`OpenAIPolicy` goes on without a list (a 404) and, with
``check_model=False``, without its model in the list.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx

from agentgym.http import PerLoop, describe_error, request_with_retries, url_of
from agentgym.policies.router import Router, Server, Unreachable, base_urls
from agentgym.policy import Generation, GenerationRequest, PolicyUnavailable

__all__ = [
    "CHECK_TIMEOUT_S",
    "NoModelList",
    "OpenAIPolicy",
    "OpenAIRequestError",
    "require_served",
    "served_models",
]

#: Upper bound on the one attempt of a ``check`` (seconds): a server that is up answers
#: its model list at once, even while it generates.
CHECK_TIMEOUT_S = 10.0


class OpenAIRequestError(RuntimeError):
    """A chat completion failed for good (after retries where they apply), or its answer is not
    a chat completion."""


class NoModelList(PolicyUnavailable):
    """The server answered 404 to ``GET /models``: it does not list its models."""


async def served_models(
    client: httpx.AsyncClient, path: str, *, timeout: float, refused: str = ""
) -> list[dict[str, Any]]:
    """The model list (``data``) of an OpenAI-compatible server from ``GET path``, asked once.

    Raises :class:`~agentgym.policy.PolicyUnavailable`, naming the URL and the cause: a
    :class:`~agentgym.policies.router.Unreachable` when there is no answer within ``timeout``
    seconds (connection refused fails at once) or a 5xx answer; when the server refuses the
    request (401/403; ``refused`` is added to the message: what key was sent); for any other
    error answer (:class:`NoModelList` for a 404).
    """
    url = url_of(client, path)
    try:
        async with asyncio.timeout(timeout):
            response = await client.get(path)
    except (TimeoutError, httpx.TimeoutException):
        raise Unreachable(f"no answer from {url} within {timeout} s") from None
    except httpx.TransportError as exc:
        raise Unreachable(f"cannot reach {url}: {describe_error(exc)}") from None
    if response.status_code in (401, 403):
        raise PolicyUnavailable(
            f"{url} refused the request (HTTP {response.status_code}: {response.text[:200]}){refused}"
        )
    if response.status_code >= 400:
        status = response.status_code
        failed = Unreachable if status >= 500 else NoModelList if status == 404 else PolicyUnavailable
        raise failed(f"GET {url} failed: HTTP {response.status_code}: {response.text[:500]}")
    try:
        return list(response.json()["data"])
    except (ValueError, KeyError, TypeError):
        raise PolicyUnavailable(
            f"GET {url} did not answer an OpenAI model list: {response.text[:200]!r}"
        ) from None


def require_served(models: list[dict[str, Any]], model: str, url: str, hint: str = "") -> None:
    """Raise :class:`~agentgym.policy.PolicyUnavailable` unless ``model`` is one of the ``id``
    s of ``models`` (the list :func:`served_models` returned for ``url``); ``hint`` ends the
    message."""
    ids = [m.get("id") for m in models]
    if model not in ids:
        raise PolicyUnavailable(f"model {model!r} is not served at {url} (served: {ids}){hint}")


class _Secret:
    """A string that never shows in a repr (nor in ``vars()`` of its holder)."""

    __slots__ = ("value",)

    def __init__(self, value: str):
        self.value = value

    def __repr__(self) -> str:
        return "<secret>"


class OpenAIPolicy:
    """A :class:`~agentgym.policy.Policy` served by an OpenAI-compatible chat completions API.

    Args:
        base_url: the API root, with its version: ``https://api.openai.com/v1``,
            ``http://127.0.0.1:8000/v1`` (a vLLM server); or a list of them, servers of the
            same model that share the requests (see :mod:`agentgym.policies.router`).
        model: the model name the server serves.
        api_key_env: name of the environment variable holding the API key, read once here. When
            it is unset (or ``None``), no ``Authorization`` header is sent (local servers need
            none); :meth:`check` says so if the server then refuses.
        timeout: seconds per HTTP attempt.
        max_retries, backoff: connection errors, 429 and 5xx answers are retried
            ``max_retries`` times, the k-th retry after a random time of at most
            ``backoff * 2**k`` seconds (k = 0, 1, ...; exponential backoff with full jitter) or
            after the answer's ``Retry-After`` (or ``retry-after-ms``); a timeout or another
            4xx answer is not (see :func:`~agentgym.http.request_with_retries`). The calls to
            one server share one :class:`~agentgym.http.RetryBudget`: no request starts before
            the latest ``Retry-After`` any of its answers gave (at most
            :data:`~agentgym.http.MAX_RETRY_WAIT_S`), and once a call has failed for good on
            such a failure, calls are sent once each, without retries, until one succeeds. A
            failed call that its caller repeats (``agentgym eval`` runs an episode again,
            ``retries`` times) so costs at most ``max_retries + 1 + retries`` requests, not
            ``(max_retries + 1) * (retries + 1)``.
        max_concurrency: chat completions in flight at once, over all servers (more wait
            their turn, and their timeout starts only then).
        extra_body: fields added to every request body (server extensions such as vLLM's
            ``return_token_ids`` or ``top_k``); they override the fields set from the request.
        check_model: whether :meth:`check` requires :attr:`model` in the server's model list.
            Set it to ``False`` for servers that take names they do not list (aliases,
            routers, names with a tag or a provider prefix): the check still asks for the list
            (the server is up and takes the key), not for the model in it. A server without a
            model list (``GET {base_url}/models`` answers 404) passes either way, with a
            warning when this is set.
        cooldown: with several servers, seconds before a server that failed is probed again
            (``GET {base_url}/models``, as :meth:`check` asks it) to come back into rotation.

    Each request is one call (``max_batch_size = 1``) with the request's ``messages``,
    ``max_tokens``, ``temperature``, ``top_p``, ``stop`` (when not empty) and ``seed`` (when
    set). :class:`~agentgym.policy.Generation` gets the message content as ``text`` (stop strings
    are not part of it, as the API drops them), the server's ``finish_reason``, and
    ``prompt_ids``, ``response_ids`` and ``logprobs`` only when the answer carries them
    (``prompt_token_ids``, ``choices[0].token_ids``, ``choices[0].logprobs.content``); otherwise
    they are empty. Failures raise :class:`OpenAIRequestError` naming the URL and the cause.
    HTTP clients belong to the event loop that made them; a new loop gets new ones.

    With several servers, each request goes to one as :class:`~agentgym.policies.router.Router`
    says (its ``session`` stays on one server; a server that fails is taken out of rotation
    and the request sent to another); :meth:`servers` shows how they fare.
    """

    max_batch_size = 1

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        timeout: float = 120.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_concurrency: int = 16,
        extra_body: Mapping[str, Any] | None = None,
        check_model: bool = True,
        cooldown: float = 10.0,
    ):
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        urls = base_urls(base_url)
        self.base_url: str | tuple[str, ...] = urls[0] if len(urls) == 1 else urls
        """The server's URL (no trailing slash), or a tuple of several servers' URLs."""
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_concurrency = max_concurrency
        self.extra_body = dict(extra_body or {})
        self.check_model = check_model
        key = os.environ.get(api_key_env) if api_key_env else None
        self._key = _Secret(key) if key else None
        self._router = Router.over_http(
            urls,
            timeout=self.timeout,
            api_key=key,
            error=OpenAIRequestError,
            readmit=self._check_server,
            cooldown=cooldown,
        )
        self._slots = PerLoop(lambda: asyncio.Semaphore(self.max_concurrency))

    def __repr__(self) -> str:
        return (
            f"OpenAIPolicy(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r}, key_set={self._key is not None})"
        )

    @contextlib.contextmanager
    def _redacted(self) -> Iterator[None]:
        """Re-raise an :class:`OpenAIRequestError` or
        :class:`~agentgym.policy.PolicyUnavailable` whose message contains the key (a server
        may echo it) with the key masked."""
        try:
            yield
        except (OpenAIRequestError, PolicyUnavailable) as exc:
            if self._key is None or self._key.value not in str(exc):
                raise
            raise type(exc)(str(exc).replace(self._key.value, "***")) from None

    def _key_hint(self) -> str:
        """Which key was sent, for a message about a refused request."""
        if self._key is not None:
            return f"; the key in ${self.api_key_env} was sent and refused"
        if self.api_key_env:
            return f"; no key was sent: ${self.api_key_env} is not set"
        return "; no key was sent (api_key_env is not set)"

    async def check(self) -> None:
        """Raise :class:`~agentgym.policy.PolicyUnavailable`, naming the URL and the cause,
        unless ``GET {base_url}/models`` answers (one attempt of at most ``min(timeout,
        CHECK_TIMEOUT_S)`` seconds: nothing listening fails at once), accepts the key (a 401/403
        names the environment variable), answers a model list, and lists :attr:`model` (only
        when :attr:`check_model`). A 404 (the server lists no models) passes, with a
        ``UserWarning`` when :attr:`check_model` is set.

        With several servers each is checked: one that does not answer is taken out of rotation
        (with a ``UserWarning``) while another passes; any other failure is raised."""
        await self._router.check(self._check_server)

    async def _check_server(self, server: Server) -> None:
        """:meth:`check` on one server (also what brings a server back into rotation)."""
        url = f"{server.url}/models"
        with self._redacted():
            try:
                models = await served_models(
                    server.client.get(),
                    "/models",
                    timeout=min(self.timeout, CHECK_TIMEOUT_S),
                    refused=self._key_hint(),
                )
            except NoModelList:
                if self.check_model:
                    warnings.warn(
                        f"{url} answered 404: the server lists no models, so whether it serves "
                        f"{self.model!r} is not checked",
                        stacklevel=2,
                    )
                return
            if not self.check_model:
                return
            require_served(
                models, self.model, url, "; set check_model=false if the server takes names it does not list"
            )

    def chat_body(self, request: GenerationRequest) -> dict[str, Any]:
        """The ``/chat/completions`` payload of ``request``."""
        sampling = request.sampling
        body: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if request.seed is not None:
            body["seed"] = request.seed
        return {**body, **self.extra_body}

    def _generation(self, url: str, data: Any) -> Generation:
        """The :class:`~agentgym.policy.Generation` of a chat completion answer from ``url``."""
        try:
            choice = data["choices"][0]
            text = choice["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise OpenAIRequestError(
                f"{url}/chat/completions answered no chat completion: {str(data)[:300]!r}"
            ) from None
        logprobs = (choice.get("logprobs") or {}).get("content") or []
        return Generation(
            text=text,
            prompt_ids=list(data.get("prompt_token_ids") or []),
            response_ids=list(choice.get("token_ids") or []),
            logprobs=[float(token["logprob"]) for token in logprobs],
            finish_reason=choice.get("finish_reason"),
        )

    async def _complete(self, request: GenerationRequest) -> Generation:
        body = self.chat_body(request)

        async def on(server: Server) -> Generation:
            with self._redacted():  # failures are kept in the router's snapshot too
                data = await request_with_retries(
                    server.client.get(),
                    "POST",
                    "/chat/completions",
                    body,
                    timeout=self.timeout,
                    max_retries=self.max_retries,
                    backoff=self.backoff,
                    error=OpenAIRequestError,
                    budget=server.budget,
                )
                return self._generation(server.url, data)

        async with self._slots.get():
            return await self._router.run(request.session, on)

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        """One generation per request, in order; the requests run concurrently (at most
        ``max_concurrency`` calls in flight)."""
        return list(await asyncio.gather(*(self._complete(r) for r in requests)))

    def servers(self) -> list[dict[str, Any]]:
        """How each server fares now: ``url``, ``healthy`` (in rotation), ``in_flight``,
        ``served`` (requests answered), ``failures`` (times taken out of rotation), ``error``
        (why it is out) and ``sessions`` (sessions it holds)."""
        return self._router.snapshot()

    async def aclose(self) -> None:
        """Close the HTTP clients (idempotent)."""
        self._slots.pop()
        await self._router.aclose()
