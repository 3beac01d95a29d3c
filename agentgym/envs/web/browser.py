"""``agentgym/Shop-v0``: the shop in a real browser (Chromium driven by Playwright).

The observation is the task, the page's URL (path and query) and its accessibility snapshot
(Playwright's ``aria_snapshot(mode="ai")``), in which every element an agent can act on carries
a ref such as ``[ref=e12]``. Actions (one per step):

=========================  ==================================================================
``click(e12)``             click the element with that ref
``fill(e4, "text")``       type into a text box (at most :data:`MAX_FILL_CHARS` characters)
``select(e7, "label")``    choose an option of a drop-down, by its label or value
``press("Enter")``         press a key (Playwright key names: ``Enter``, ``Tab``, ``ArrowDown``)
``scroll(down)``           scroll the page ``up`` or ``down``
``back()``                 go to the previous page
``goto("/cart")``          open a path of this shop (no other host)
``stop()``                 end the episode without buying (reward 0)
=========================  ==================================================================

Refs may be quoted or bare. A malformed action, a ref not on the page, a fill of something that
is not a text box, a ``goto`` to another host, a link that leads off the shop (the browser is
taken back), or any action that fails within :data:`ACTION_TIMEOUT_MS` is answered with feedback
and ``action_valid=False``. JavaScript dialogs are accepted and their text shown in the next
observation; a window or tab that an action opens (``press("Shift+Enter")`` on a link) is
closed as it opens, and said so. A browser that dies mid-episode truncates the episode with
``info["error"]``; the next reset starts a fresh one.

One browser per process (:class:`BrowserHost`, shared by every env instance there, with the
shop's web server on the same event loop), and a fresh browser context per episode: no cookie,
cart, cache or localStorage carries over. A page reaches its shop only: any other request (to
another port of this host, to another host) is refused before it leaves the browser, the APIs
whose connections no request route sees are gone (:data:`UNROUTED_APIS`), and Chromium
resolves no host name but 127.0.0.1 (``--host-resolver-rules``); run sandboxed for a boundary
that holds against Chromium itself. With
``screenshot=True``, ``info["screenshot"]`` is the page as a PNG ``data:`` URI, ready for a
multimodal chat message.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import concurrent.futures
import contextlib
import hashlib
import os
import re
import shutil
import socket
import threading
from collections.abc import Awaitable, Coroutine
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

import gymnasium as gym

from agentgym.env import coerce_action
from agentgym.envs.web.base import ShopEnvBase, shop_for

__all__ = [
    "ACTION_TIMEOUT_MS",
    "MAX_FILL_CHARS",
    "UNROUTED_APIS",
    "BrowserHost",
    "ShopBrowserEnv",
    "chromium_path",
]

#: Longest text ``fill`` types.
MAX_FILL_CHARS = 2000
#: How long one browser action may take before it is answered as failed.
ACTION_TIMEOUT_MS = 3000
#: How long a reset's first page may take: the shop's own home page in a fresh context, not the
#: agent's doing, which a loaded machine may take longer than an action's 3 s to load.
OPEN_TIMEOUT_MS = 15_000
#: Wall-clock bound of a whole reset or step; past it the episode ends with ``info["error"]``.
STEP_TIMEOUT_S = 30.0
#: Longest snapshot shown; longer ones are cut (the shop's pages stay far below).
MAX_SNAPSHOT_CHARS = 30_000
#: Marks the Chromium processes of this process's host (tests find leftovers by it).
HOST_MARK = "--agentgym-browser-host"
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-extensions",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    # A navigation keeps its renderer: about 25 ms less per step (benchmarks/web.py),
    # and back() reloads the page from the shop, so it shows the current cart.
    "--disable-features=BackForwardCache,ProactivelySwapBrowsingInstance,RenderDocument",
)
#: Ways out of a page that Playwright's request routes never see (WebSockets, WebRTC's TURN
#: connections, WebTransport, and workers, which have WebSockets of their own): the shop uses
#: none, and every frame of an episode starts without them.
UNROUTED_APIS = (
    "WebSocket",
    "WebSocketStream",
    "RTCPeerConnection",
    "webkitRTCPeerConnection",
    "WebTransport",
    "Worker",
    "SharedWorker",
)
_WITHOUT_UNROUTED_APIS = ";".join(f"delete globalThis.{api}" for api in UNROUTED_APIS)
VERBS = {"click": 1, "fill": 2, "select": 2, "press": 1, "scroll": 1, "back": 0, "goto": 1, "stop": 0}
USAGE = (
    'Actions: click(ref), fill(ref, "text"), select(ref, "option"), press("Enter"), '
    'scroll(up|down), back(), goto("/path"), stop().'
)
T = TypeVar("T")


def chromium_path() -> str:
    """The Chromium to drive: ``$AGENTGYM_CHROMIUM``, else Debian's binary, else ``chromium`` on
    the PATH. Raises RuntimeError saying how to install it when there is none."""
    for candidate in (
        os.environ.get("AGENTGYM_CHROMIUM"),
        "/usr/lib/chromium/chromium",
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
    ):
        if candidate and os.access(candidate, os.X_OK) and Path(candidate).is_file():
            return candidate
    raise RuntimeError(
        "agentgym/Shop-v0 needs Chromium: apt-get install chromium (or set "
        "AGENTGYM_CHROMIUM to a Chromium binary); ShopText-v0 needs no browser"
    )


class BrowserHost:
    """This process's browser and shop servers, on one event loop in a daemon thread.

    :meth:`acquire` returns the host (starting it on first use) and counts the user;
    :meth:`release` uncounts, and the last user's release closes the browser and the servers,
    so no Chromium outlives the envs. Playwright objects live on the host's loop only: run
    coroutines there with :meth:`run` (blocking) or :meth:`arun` (from another event loop).
    """

    _current: BrowserHost | None = None
    _guard = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="agentgym-browser", daemon=True)
        self._thread.start()
        self._users = 0
        self._playwright: Any = None
        self._browser: Any = None
        self._sites: dict[int, tuple[str, Any, asyncio.Task[None]]] = {}
        self._starting = asyncio.Lock()  # envs resetting at once start one browser, one server

    @classmethod
    def acquire(cls) -> BrowserHost:
        with cls._guard:
            if cls._current is None:
                cls._current = cls()
            cls._current._users += 1
            return cls._current

    def release(self) -> None:
        with BrowserHost._guard:
            self._users -= 1
            if self._users > 0:
                return
            if BrowserHost._current is self:
                BrowserHost._current = None
        try:
            self.run(self._shutdown(), timeout=STEP_TIMEOUT_S)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the host's loop and wait for its result (from any other thread)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"the browser did not answer within {timeout} s") from None

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` run on the host's loop, from another event loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    async def browser(self) -> Any:
        """The browser, (re)launched when there is none or it died."""
        async with self._starting:
            return await self._launched()

    async def _launched(self) -> Any:
        if self._browser is None or not self._browser.is_connected():
            if self._playwright is None:
                from playwright.async_api import async_playwright

                self._playwright = await async_playwright().start()
            self._browser = await self._playwright.chromium.launch(
                executable_path=chromium_path(), args=[*CHROMIUM_ARGS, f"{HOST_MARK}={os.getpid()}"]
            )
        return self._browser

    async def site(self, catalog_seed: int) -> str:
        """Base URL of this process's shop server for ``catalog_seed`` (started on first use)."""
        async with self._starting:
            return await self._serving(catalog_seed)

    async def _serving(self, catalog_seed: int) -> str:
        if catalog_seed not in self._sites:
            import uvicorn

            from agentgym.envs.web.site.app import create_app

            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            config = uvicorn.Config(
                create_app(shop_for(catalog_seed)), log_level="warning", access_log=False, lifespan="off"
            )
            server = uvicorn.Server(config)
            task = asyncio.create_task(server.serve(sockets=[sock]))
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.005)
            self._sites[catalog_seed] = (f"http://127.0.0.1:{sock.getsockname()[1]}", server, task)
        return self._sites[catalog_seed][0]

    async def _shutdown(self) -> None:
        if self._browser is not None:
            await _quietly(self._browser.close())
        if self._playwright is not None:
            await _quietly(self._playwright.stop())
        for _, server, task in self._sites.values():
            server.should_exit = True
            await _quietly(task)
        self._browser = self._playwright = None
        self._sites.clear()


async def _refuse(route: Any) -> None:
    """Answer a request the page may not send as the browser's own refusal."""
    await _quietly(route.abort("blockedbyclient"))


async def _quietly(awaitable: Awaitable[Any]) -> None:
    """Await ``awaitable``, ignoring its failure: closing what may already be gone."""
    with contextlib.suppress(Exception):
        await awaitable


class ShopBrowserEnv(ShopEnvBase):
    """The shop in Chromium (see the module documentation).

    Args:
        screenshot: put the page's PNG into ``info["screenshot"]`` after every reset and step.
        split, catalog_seed, max_steps, reward: as for :class:`~agentgym.envs.web.base.ShopEnvBase`.
    """

    def __init__(self, *, screenshot: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        chromium_path()  # a clear error now rather than at the first reset
        self.screenshot = bool(screenshot)
        self.host: BrowserHost | None = BrowserHost.acquire()
        self.context: Any = None
        self.page: Any = None
        self._site = ""
        self._notes: list[str] = []  # dialogs and blocked navigations since the last observation
        self._snapshot, self._url, self._picture = "", "/", ""

    # -- Gymnasium API: the sync methods wait for the async ones on the host's loop --------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start a task (``options={"task_id": ...}``, else drawn with ``seed``) on the home
        page, in a fresh browser context."""
        self._begin_reset(seed, options)
        return self._live().run(self._guarded(self._open(), reset=True), timeout=STEP_TIMEOUT_S + 5)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        text = coerce_action(action)
        if (over := self._episode_over()) is not None:
            return over
        return self._live().run(self._guarded(self._act(text)), timeout=STEP_TIMEOUT_S + 5)

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        self._begin_reset(seed, options)
        return await self._live().arun(self._guarded(self._open(), reset=True))

    async def astep(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        text = coerce_action(action)
        if (over := self._episode_over()) is not None:
            return over
        return await self._live().arun(self._guarded(self._act(text)))

    def __getstate__(self) -> dict[str, Any]:
        """Never pickled or copied: an episode's state is a live browser page, not data of this process."""
        raise TypeError(
            f"{type(self).__name__} cannot be pickled or copied: an episode's state is a live browser page; "
            "to replay a task, reset a new env with options={'task_id': ...}"
        )

    def close(self) -> None:
        if self.host is not None:
            host, self.host = self.host, None
            try:
                host.run(self._close_context(), timeout=STEP_TIMEOUT_S)
            finally:
                host.release()
        super().close()

    def _live(self) -> BrowserHost:
        if self.host is None:
            raise RuntimeError("ShopBrowserEnv is closed")
        return self.host

    def _begin_reset(self, seed: int | None, options: dict[str, Any] | None) -> None:
        gym.Env.reset(self, seed=seed)
        self._start(seed, options)

    async def _guarded(self, coro: Coroutine[Any, Any, T], *, reset: bool = False) -> T:
        """``coro`` bounded by :data:`STEP_TIMEOUT_S`; a dead browser or a timeout ends the
        episode with ``info["error"]`` instead of raising (the answer shaped as ``reset``'s or
        ``step``'s)."""
        try:
            return await asyncio.wait_for(coro, STEP_TIMEOUT_S)
        except Exception as exc:
            from playwright.async_api import Error as PlaywrightError

            if not isinstance(exc, (PlaywrightError, asyncio.TimeoutError)):
                raise
            alive = (
                self.host is not None and self.host._browser is not None and self.host._browser.is_connected()
            )
            cause = "the browser crashed" if not alive else f"the browser stopped answering ({exc!s:.200})"
            self._done = True
            await _quietly(self._close_context())
            info = self._info() | {"action_valid": False, "error": cause}
            result: Any = (
                (f"Error: {cause}; the episode ends.", info)
                if reset
                else (f"Error: {cause}; the episode ends.", 0.0, False, True, info)
            )
            return result

    # -- episodes ------------------------------------------------------------------------------

    async def _open(self) -> tuple[str, dict[str, Any]]:
        await self._close_context()
        assert self.host is not None
        self._site = await self.host.site(self.catalog_seed)
        browser = await self.host.browser()
        self.context = await browser.new_context(
            viewport={"width": 1280, "height": 800}, service_workers="block"
        )
        self.context.set_default_timeout(ACTION_TIMEOUT_MS)
        # Every request but the shop's is refused before it leaves the browser: another port
        # of this host (an env server, a model server) is as far out of reach as another host.
        # (a pattern, unlike a function, is matched in Playwright's driver: the shop's own
        # requests never wait on this process)
        await self.context.route(re.compile(rf"^(?!{re.escape(self._site)}/)"), _refuse)
        await self.context.add_init_script(_WITHOUT_UNROUTED_APIS)
        await self.context.add_cookies([{"name": "sid", "value": self.sid, "url": self._site}])
        self.page = await self.context.new_page()
        self.page.on("dialog", self._on_dialog)
        self.page.on("request", self._on_request)
        self.context.on("page", self._on_page)
        self._notes = []
        await self.page.goto(self._site + "/", timeout=OPEN_TIMEOUT_MS)
        await self._look()
        return self._observe(""), self._info()

    async def _close_context(self) -> None:
        if self.context is not None:
            context, self.context, self.page = self.context, None, None
            await _quietly(context.close())

    def _on_dialog(self, dialog: Any) -> None:
        self._notes.append(f"A {dialog.type} dialog said: {dialog.message!r} (accepted).")
        asyncio.ensure_future(_quietly(dialog.accept()))  # noqa: RUF006 - the page holds the dialog

    def _on_page(self, page: Any) -> None:
        # A window the agent opened (Shift+Enter or Control+Enter on a link): each is a renderer
        # of ~30 MB that nothing else would close before the episode ends.
        if page is not self.page:
            self._notes.append(
                "A window or tab that an action opened was closed: this shop is browsed in one tab."
            )
            asyncio.ensure_future(_quietly(page.close()))  # noqa: RUF006 - the context holds the page

    def _on_request(self, request: Any) -> None:
        if request.is_navigation_request() and not request.url.startswith(self._site + "/"):
            host = urlsplit(request.url).netloc or request.url[:60]
            self._notes.append(f"That leads off this shop ({host}); you were taken back.")

    async def _act(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        parsed = parse_action(text)
        if isinstance(parsed, str):
            feedback = parsed
        elif parsed[0] == "stop":
            reward, terminated, truncated = self._stop()
            return (
                "You stopped without buying.",
                reward,
                terminated,
                truncated,
                self._info() | {"action_valid": True},
            )
        else:
            feedback = await self._do(*parsed)
        await self._settle()
        reward, terminated, truncated = self._after_action()
        return (
            self._observe(feedback),
            reward,
            terminated,
            truncated,
            self._info() | {"action_valid": not feedback},
        )

    async def _do(self, verb: str, args: list[str]) -> str:
        """Carry out one parsed action; its feedback when invalid, else ""."""
        from playwright.async_api import Error as PlaywrightError

        page = self.page
        if verb in ("click", "fill", "select"):
            ref = args[0].strip()
            if not ref or not ref.replace("-", "").isalnum():
                return f"{ref!r} is not an element ref; refs look like e12."
            if ref not in element_refs(self._snapshot):  # the page the agent saw has no such element
                return f"There is no element {ref} on this page."
            target = page.locator(f"aria-ref={ref}")
            if verb == "fill" and len(args[1]) > MAX_FILL_CHARS:  # the quotes fit, the text not
                return f"That text has {len(args[1])} characters; fill takes at most {MAX_FILL_CHARS}."
        try:
            if verb == "click":
                # No actionability wait (two animation frames of a stable box, ~30 ms): refs
                # come from the snapshot of visible elements, and the shop does not animate.
                await target.click(force=True)
            elif verb == "fill":
                await target.fill(args[1])
            elif verb == "select":
                try:
                    await target.select_option(label=args[1])
                except PlaywrightError:
                    await target.select_option(value=args[1])
            elif verb == "press":
                # A locator's press, unlike the keyboard's, waits for a navigation the key starts
                # (Enter in a form) to commit: the observation is then the new page. The body
                # is not focusable, so the key still goes to the focused element.
                await page.locator("body").press(args[0])
            elif verb == "scroll":
                if args[0].lower() not in ("up", "down"):
                    return "scroll takes up or down."
                await page.mouse.wheel(0, -600 if args[0].lower() == "up" else 600)
            elif verb == "back":
                if await page.go_back() is None:
                    return "There is no previous page."
            elif verb == "goto":
                url = urljoin(self._site + "/", args[0].strip())
                if not url.startswith(self._site + "/"):
                    return f"goto only opens pages of this shop (a path such as /cart), not {args[0]!r}."
                await page.goto(url)
        except PlaywrightError as exc:
            if not self.host or not self.host._browser or not self.host._browser.is_connected():
                raise
            return f"{verb} failed: {_first_line(exc)}"
        return ""

    async def _settle(self) -> None:
        """Wait for the page an action started to load; leave a page off the shop."""
        from playwright.async_api import Error as PlaywrightError

        try:
            await self.page.wait_for_load_state("domcontentloaded")
        except PlaywrightError:
            pass
        if not self.page.url.startswith(self._site + "/"):
            try:
                if await self.page.go_back() is None:
                    await self.page.goto(self._site + "/")
            except PlaywrightError:
                await self.page.goto(self._site + "/")
        await self._look()

    async def _look(self) -> None:
        """Read the page: URL, snapshot (and screenshot when asked for)."""
        for attempt in range(3):
            try:
                self._snapshot = await self.page.aria_snapshot(mode="ai")
                break
            except Exception:  # a page still navigating has no document to read yet
                if attempt == 2:
                    raise
                await asyncio.sleep(0.05)
        if len(self._snapshot) > MAX_SNAPSHOT_CHARS:
            self._snapshot = self._snapshot[:MAX_SNAPSHOT_CHARS] + "\n... (cut)"
        url = urlsplit(self.page.url)
        self._url = url.path + (f"?{url.query}" if url.query else "")
        if self.screenshot:
            png = await self.page.screenshot()
            self._picture = "data:image/png;base64," + base64.b64encode(png).decode()

    def _observe(self, feedback: str) -> str:
        notes, self._notes = self._notes, []
        lines = [f"Task: {self.goal.instruction}", f"URL: {self._url}", *notes]
        if feedback:
            lines.append(feedback)
        return "\n".join(lines) + "\n---\n" + self._snapshot

    def _where(self) -> tuple[str, str]:
        digest = hashlib.sha256(self._snapshot.encode()).hexdigest()[:16]
        return self._url, f"{self._url}|{digest}|{self._cart_key()}"

    def _info(self) -> dict[str, Any]:
        info = super()._info()
        if self.screenshot and self._picture:
            info["screenshot"] = self._picture
        return info

    def render_text(self) -> str:
        return f"{self.goal.id} ({self._steps}/{self.max_steps} steps)\n{self._observe('')}"


_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_REF = re.compile(r"\[ref=([^\]\s]+)\]")


def element_refs(snapshot: str) -> frozenset[str]:
    """The refs of the elements of an accessibility snapshot: on each line, a ``[ref=...]``
    outside quoted names and before the text the line shows (after its first ``": "``). Text
    the page shows may itself read ``[ref=e9]`` (a search the shop echoes): that is no
    element."""
    refs: set[str] = set()
    for line in snapshot.splitlines():
        refs.update(_REF.findall(_QUOTED.sub('""', line).partition(": ")[0]))
    return frozenset(refs)


def parse_action(text: str) -> tuple[str, list[str]] | str:
    """``(verb, args)`` of an action such as ``fill(e4, "red shoes")``, or the feedback that
    says why it is not one. Arguments are Python literals or bare words (``click(e12)``)."""
    text = text.strip()
    if len(text) > MAX_FILL_CHARS + 100:
        verb = text.partition("(")[0].strip()[:40] or "an action"
        return (
            f"That action ({verb}) has {len(text)} characters; an action takes at most "
            f"{MAX_FILL_CHARS + 100} (the text of fill at most {MAX_FILL_CHARS})."
        )
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # NUL, lone surrogates, nesting
        tree = None
    if not isinstance(tree, ast.Call) or not isinstance(tree.func, ast.Name) or tree.keywords:
        return f"Not an action: {text[:120]!r}. {USAGE}"
    verb = tree.func.id.lower()
    if verb not in VERBS:
        return f"Unknown action {verb!r}. {USAGE}"
    args = []
    for arg in tree.args:
        if isinstance(arg, ast.Name):
            args.append(arg.id)
        elif isinstance(arg, ast.Constant) and isinstance(arg.value, (str, int)):
            args.append(str(arg.value))
        else:
            return f"The arguments of {verb} are refs and quoted text. {USAGE}"
    if len(args) != VERBS[verb]:
        return f"{verb} takes {VERBS[verb]} argument(s), got {len(args)}. {USAGE}"
    return verb, args


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text.removeprefix("Error: ")[:300]
