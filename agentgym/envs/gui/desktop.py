"""The client of one desktop: starts :mod:`~agentgym.envs.gui.driver` under Debian's Python and
talks to it (JSON lines over pipes), owns the desktop's home directory and cleans up after it.

A :class:`Desktop` is started once and reused across episodes; an episode's reset stops the
applications (:meth:`Desktop.close_apps`), rebuilds the home directory and launches what the
task needs. The desktop runs in a network namespace of its own, so that its applications reach
no TCP or UDP port of this host (:func:`_private_network`). When this process runs as root, the desktop
runs as :data:`DESKTOP_UID` (GTK applications warn in their windows when run as root), unless
the capability to change uid was dropped (inside bubblewrap or a container).
:meth:`Desktop.close` stops the X server, the buses and every application and removes the home
directory; the driver also stops everything when this process dies.

A desktop lives in a fresh temporary directory, but what it shows is the same in every process:
:meth:`Desktop.tree` shows that directory as :data:`SHOWN_ROOT`, so the home directory is
``/home/user`` in window titles, location bars and file URIs, and leaves out the host's free disk
space (which Thunar's status bar reports); :meth:`Desktop.real` points the ``/home/user`` paths
an agent types at the real home directory.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import select
import shutil
import socket
import subprocess
import tempfile
import time
import warnings
import weakref
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from agentgym.process import ManagedProcess

__all__ = [
    "DESKTOP_UID",
    "SHOWN_HOME",
    "SHOWN_ROOT",
    "SYSTEM_PYTHON",
    "Desktop",
    "DesktopError",
    "desktop_available",
]

#: The Python that has ``gi`` with Atspi and Gdk (Debian's python3-gi, gir1.2-atspi-2.0,
#: gir1.2-gtk-3.0); the driver runs under it.
SYSTEM_PYTHON = os.environ.get("AGENTGYM_DESKTOP_PYTHON", "/usr/bin/python3")
#: The uid and gid the desktop runs as when this process is root.
DESKTOP_UID = 1000
#: Programs a desktop needs besides :data:`SYSTEM_PYTHON`.
PROGRAMS = ("Xvfb", "dbus-daemon", "openbox", "xdotool", "setpriv", "unshare")
DRIVER = Path(__file__).with_name("driver.py")
#: The desktop's directory as observations show it; the home directory is the folder
#: ``HOME_NAME`` in it, shown as :data:`SHOWN_HOME`.
SHOWN_ROOT = "/home"
HOME_NAME = "user"
SHOWN_HOME = f"{SHOWN_ROOT}/{HOME_NAME}"
#: Thunar's status bar's "  |  Free space: 57.6 GiB": a host value, the same desktop state or not.
_FREE_SPACE = re.compile(r"(?:\s*\|\s*)?Free space: [\d.,]+\s*\w+")
#: SHOWN_HOME as a path of its own (not inside another path or name) in typed text.
_TYPED_HOME = re.compile(rf"(?<![\w.-]){re.escape(SHOWN_HOME)}(?![\w.-])")


class DesktopError(RuntimeError):
    """The desktop failed: it could not start, an operation failed, or the driver died or hung.
    ``fatal`` says the desktop is gone (start a new one)."""

    def __init__(self, message: str, *, fatal: bool = False):
        super().__init__(message)
        self.fatal = fatal


def desktop_available() -> str | None:
    """``None`` when a desktop can start here, else what is missing (for skips and errors)."""
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    if missing:
        return f"missing programs: {', '.join(missing)}"
    probe = subprocess.run(
        [
            SYSTEM_PYTHON,
            "-c",
            "import gi; gi.require_version('Atspi', '2.0'); gi.require_version('Gdk', '3.0')",
        ],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return (
            f"{SYSTEM_PYTHON} has no gi with Atspi 2.0 and Gdk 3.0 (Debian packages "
            "python3-gi, gir1.2-atspi-2.0, gir1.2-gtk-3.0)"
        )
    return None


class Desktop:
    """One desktop (X server, buses, window manager) and the applications an episode runs.

    Args:
        width, height: screen size in pixels.
        timeout_s: longest wait for one driver answer (launching an application has its own).
    """

    def __init__(self, width: int = 1280, height: int = 800, *, timeout_s: float = 30.0):
        self.width, self.height, self.timeout_s = width, height, timeout_s
        self.root: Path | None = None
        self.display: str | None = None
        self._proc: ManagedProcess | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def home(self) -> Path:
        """The desktop user's home directory (rebuilt by :meth:`reset_home`)."""
        if self.root is None:
            raise DesktopError("the desktop is not started")
        return self.root / HOME_NAME

    def start(self) -> Desktop:
        missing = desktop_available()
        if missing is not None:
            raise DesktopError(f"a desktop cannot start here: {missing}", fatal=True)
        self.root = Path(tempfile.mkdtemp(prefix="agentgym-desktop-"))
        try:
            self.root.chmod(0o755)
            self.reset_home({})
            self._proc = ManagedProcess(
                [*_private_network(), *_drop_root(), SYSTEM_PYTHON, "-I", str(DRIVER)],
                name="the desktop's driver",
                log_path=self.root / "driver.log",
                pipe_stdio=True,
            ).start()
            runtime = self.root / "run"
            env = {
                "HOME": str(self.home),
                "XDG_RUNTIME_DIR": str(runtime),
                "XDG_CONFIG_HOME": str(self.home / ".config"),
                "XDG_CACHE_HOME": str(self.home / ".cache"),
                "XDG_DATA_HOME": str(self.home / ".local/share"),
                "GSETTINGS_BACKEND": "keyfile",
                "GTK_MODULES": "gail:atk-bridge",
                "NO_AT_BRIDGE": "0",
                "SAL_USE_VCLPLUGIN": "gtk3",
                "GDK_BACKEND": "x11",
                "LANG": "C.UTF-8",
                "LC_ALL": "C.UTF-8",
                "TMPDIR": str(self.root / "tmp"),
            }
            for folder in (runtime, self.root / "tmp"):
                folder.mkdir(mode=0o700)
                _chown(folder)
        except BaseException:  # nothing of a desktop that did not start stays behind
            if self._proc is not None:
                self._proc.kill()
                self._proc = None
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
            raise
        self._finalizer = weakref.finalize(self, _cleanup, self._proc, self.root)
        try:
            self.display = self.request("start", width=self.width, height=self.height, env=env)["display"]
        except DesktopError:
            self.close()
            raise
        return self

    def alive(self) -> bool:
        return self._proc is not None and self._proc.process is not None and self._proc.process.poll() is None

    def request(self, op: str, *, timeout_s: float | None = None, **args: Any) -> dict[str, Any]:
        """Send one operation to the driver and return its answer. A failed operation raises
        :class:`DesktopError`; a dead or silent driver raises it with ``fatal=True`` (and is
        stopped)."""
        proc = None if self._proc is None else self._proc.process
        if proc is None or proc.poll() is not None:
            raise DesktopError(f"the desktop is not running ({self._log_tail()})", fatal=True)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps({"op": op, **args}).encode() + b"\n")
            proc.stdin.flush()
        except OSError as exc:
            self._kill()
            raise DesktopError(f"the desktop's driver is gone: {exc}", fatal=True) from exc
        limit = self.timeout_s if timeout_s is None else timeout_s
        ready, _, _ = select.select([proc.stdout], [], [], limit)
        line = proc.stdout.readline() if ready else b""
        if not line:
            died = proc.poll() is not None
            self._kill()
            raise DesktopError(
                f"the desktop's driver {'died' if died else 'hung'} during {op!r} ({self._log_tail()})",
                fatal=True,
            )
        try:
            answer = json.loads(line)
            ok = answer.pop("ok")
        except (ValueError, KeyError, AttributeError) as exc:
            self._kill()
            raise DesktopError(f"the desktop's driver answered {line[:200]!r} to {op!r}", fatal=True) from exc
        if not ok:
            raise DesktopError(f"{op} failed: {answer['error']}")
        return answer

    # -- operations ----------------------------------------------------------------------------

    def reset_home(self, files: dict[str, bytes]) -> None:
        """Replace the home directory by one holding ``files`` (paths relative to it)."""
        home = self.home
        for _attempt in range(20):  # a service of the last episode may still be writing there
            shutil.rmtree(home, ignore_errors=True)
            if not home.exists():
                break
            time.sleep(0.05)
        else:
            raise DesktopError(f"the home directory {home} could not be emptied")
        home.mkdir()
        for relative, data in files.items():
            path = home / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        _chown(home, recursive=True)

    def launch(
        self, argv: list[str], app: str, box: tuple[int, int, int, int] | None = None, timeout_s: float = 60.0
    ) -> None:
        """Start an application and wait until its window shows (then place it at ``box``)."""
        self.request(
            "launch",
            argv=argv,
            app=app,
            box=list(box) if box else None,
            wait_s=timeout_s,
            timeout_s=timeout_s + 5.0,
        )

    def close_apps(self) -> None:
        self.request("close_apps")

    def tree(self, **limits: int) -> dict[str, Any]:
        """``{"nodes": [...], "focused": title, "truncated": bool}`` (see the driver), every
        name and text as :meth:`shown` makes it."""
        answer = self.request("tree", **limits)
        for node in answer["nodes"]:
            node["name"] = self.shown(node["name"])
            if "text" in node:
                node["text"] = self.shown(node["text"])
        answer["focused"] = self.shown(answer["focused"])
        return answer

    def shown(self, text: str) -> str:
        """``text`` as every process shows it: this desktop's directory as :data:`SHOWN_ROOT`
        (in paths and ``file:`` URIs; its bare name, as a path bar shows it, as that folder's
        name), and no free disk space."""
        if self.root is not None:
            for real in (str(self.root), quote(str(self.root))):
                text = text.replace(real, SHOWN_ROOT)
            text = text.replace(self.root.name, PurePosixPath(SHOWN_ROOT).name)
        return _FREE_SPACE.sub("", text)

    def real(self, text: str) -> str:
        """``text`` to type, with each :data:`SHOWN_HOME` path pointing at the real home
        directory (the path observations show is one the applications can open)."""
        home = str(self.home)
        return _TYPED_HOME.sub(lambda _match: home, text)

    def xdotool(self, *args: str | int) -> None:
        self.request("xdotool", args=[str(a) for a in args])

    def screenshot(self) -> bytes:
        """The screen as PNG bytes."""
        return base64.b64decode(self.request("screenshot")["png"])

    def close(self) -> None:
        """Stop everything this desktop started and remove its files (idempotent; also run
        when the desktop is garbage-collected or the interpreter exits)."""
        managed, self._proc = self._proc, None
        if managed is not None and managed.process is not None:
            proc = managed.process
            try:
                assert proc.stdin is not None
                proc.stdin.write(b'{"op": "quit"}\n')
                proc.stdin.close()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                pass
        if self._finalizer is not None:
            self._finalizer()
        self.root = None

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()

    def _log_tail(self) -> str:
        try:
            assert self.root is not None
            tail = (self.root / "driver.log").read_text(errors="replace").strip()[-400:]
        except (OSError, AssertionError):
            tail = ""
        return f"driver log: {tail}" if tail else "no driver log"

    def __enter__(self) -> Desktop:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cleanup(driver: ManagedProcess, root: Path) -> None:
    """SIGKILL the driver's session (every service it started), reap it, remove ``root``."""
    driver.kill()
    shutil.rmtree(root, ignore_errors=True)


@functools.lru_cache(maxsize=1)
def _drop_root() -> list[str]:
    """The command prefix that runs the desktop as DESKTOP_UID: empty unless this process is
    root and may change its uid (not inside a sandbox that dropped the capability)."""
    if os.geteuid() != 0:
        return []
    prefix = ["setpriv", f"--reuid={DESKTOP_UID}", f"--regid={DESKTOP_UID}", "--clear-groups"]
    works = subprocess.run([*prefix, "true"], capture_output=True).returncode == 0
    return prefix if works else []


@functools.lru_cache(maxsize=1)
def _private_network() -> list[str]:
    """The command prefix that gives the desktop a network namespace of its own, whose only
    interface is a loopback that is down: what an application opens (a spreadsheet's
    ``WEBSERVICE``, a document's link) reaches no TCP or UDP port of this host and no other
    host (Unix sockets are files: the desktop's user opens those its permissions allow). As root,
    a plain network namespace (the desktop then drops to :data:`DESKTOP_UID`); otherwise one in
    a user namespace that maps the user to itself. Empty where neither may be made, with a
    warning unless this process has no network either (inside the sandboxes)."""
    prefix = ["unshare", "--net"] if _drop_root() else ["unshare", "--net", "--map-current-user"]
    if subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
        return prefix
    if any(name != "lo" for _, name in socket.if_nameindex()):
        warnings.warn(
            "the desktop shares this host's network (no network namespace may be made here): "
            "its applications can reach this host's ports; run it with sandbox='local' or 'docker'",
            stacklevel=2,
        )
    return []


def _chown(path: Path, *, recursive: bool = False) -> None:
    if not _drop_root():
        return
    os.chown(path, DESKTOP_UID, DESKTOP_UID)
    if recursive:
        for folder, dirs, files in os.walk(path):
            for name in dirs + files:
                os.chown(os.path.join(folder, name), DESKTOP_UID, DESKTOP_UID, follow_symlinks=False)
