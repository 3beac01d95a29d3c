"""``agentgym build``: container images, built without network access.

Each ``containers/<name>/Dockerfile`` makes one image: an env family's (its env servers, for
sandboxes) or the harness's (``containers/harness``: ``agentgym eval`` in a container, starting
env sandboxes as sibling containers through the host's Docker socket). The host makes a
wheelhouse (``pip wheel`` of agentgym and its core dependencies, plus the extras the images
need: those the family's envs declare, or :data:`IMAGE_EXTRAS`) in a temporary build context,
and each Dockerfile installs from it with ``pip install --no-index``. Images are
tagged ``agentgym/<name>:<agentgym version>`` and ``:latest`` and labelled
``agentgym.image=<name>``, ``agentgym.version``, ``agentgym.base`` and ``agentgym.source``
(:func:`source_digest` of the sources baked in; :func:`image_matches_source` tells whether an
image still runs the code of this checkout). Dockerfiles stay within
the legacy builder (no BuildKit on the CI machines).

Machines without a registry first build the base image offline (:func:`build_base_image`:
mmdebstrap + ``docker import``, ``containers/base/build.sh``) and pass
``base_image=OFFLINE_BASE_IMAGE``. The wheels are built for the host's Python, so the base image
must have the same Python minor version (3.11 on both bookworm bases).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentgym._version import __version__
from agentgym.cache import host_lock
from agentgym.registry import list_envs
from agentgym.sandbox.base import SandboxError, SandboxWarning
from agentgym.sandbox.daemon import docker_client
from agentgym.sandbox.docker import build_command

__all__ = [
    "BUILD_LOCK",
    "DEFAULT_BASE_IMAGE",
    "IMAGE_EXTRAS",
    "OFFLINE_BASE_IMAGE",
    "build_base_image",
    "build_images",
    "build_wheelhouse",
    "containers_dir",
    "family_packages",
    "image_exists",
    "image_families",
    "image_matches_source",
    "source_digest",
    "warn_if_stale",
]

_PACKAGE_DIR = Path(__file__).resolve().parents[1]
"""The installed ``agentgym`` package (in a checkout, its ``agentgym/`` folder)."""

DEFAULT_BASE_IMAGE = "python:3.11-slim-bookworm"
OFFLINE_BASE_IMAGE = "agentgym/base:bookworm"
BUILD_LOCK = "docker-images"
"""The :func:`~agentgym.cache.host_lock` that image builds hold."""

IMAGE_EXTRAS: dict[str, tuple[str, ...]] = {"harness": ("harness",)}
"""The extras of agentgym installed in the images that are not env families."""


def family_packages(family: str) -> tuple[str, ...]:
    """The Debian packages a family's image needs besides Python: those its envs' manifests
    declare (``EnvManifest.system_packages``), in order, once. Offline, they go into a base of
    the image's own (``agentgym/base-<name>:bookworm-<digest of the package list>``); on another
    base the Dockerfile installs them."""
    packages: dict[str, None] = {}
    for m in list_envs().values():
        if m.family == family:
            packages |= dict.fromkeys(m.system_packages)
    return tuple(packages)


def containers_dir() -> Path:
    """The ``containers/`` directory: ``$AGENTGYM_CONTAINERS``, else the one next to the
    agentgym source tree (a checkout; wheels do not ship it)."""
    path = Path(os.environ.get("AGENTGYM_CONTAINERS") or _PACKAGE_DIR.parent / "containers")
    if not (path / "base" / "build.sh").is_file():
        raise SandboxError(
            f"no containers/ directory at {path}: building images needs a checkout "
            "of agentgym's source (or AGENTGYM_CONTAINERS pointing at one)"
        )
    return path


def image_families() -> list[str]:
    """The images with a ``containers/<name>/Dockerfile``: env families, and the harness."""
    return sorted(d.name for d in containers_dir().iterdir() if (d / "Dockerfile").is_file())


def _client(client: Any) -> Any:
    if client is not None:
        return client
    return docker_client()


def _replaced(client: Any, old_id: str | None, new_id: str) -> None:
    """Remove the image ``old_id`` that a rebuild took the tags from, unless it is still tagged
    or used (a rebuild would otherwise leave a dangling copy of every previous build)."""
    import docker.errors

    if old_id is None or old_id == new_id:
        return
    try:
        if not client.images.get(old_id).tags:
            client.images.remove(old_id)
    except docker.errors.APIError:  # a container still uses it, or it is already gone
        pass


def _image_id(client: Any, tag: str) -> str | None:
    """The id of image ``tag``, or ``None`` if the daemon does not have it."""
    import docker.errors

    try:
        return client.images.get(tag).id
    except docker.errors.ImageNotFound:
        return None


def image_exists(tag: str, *, client: Any = None) -> bool:
    """Whether the daemon has image ``tag`` locally."""
    return _image_id(_client(client), tag) is not None


def source_digest() -> str:
    """sha256 (hex) of the ``.py`` and ``.yaml`` files of the agentgym package as this process
    finds it: what :func:`build_images` bakes into an image (a few ms). The same in a checkout
    and in an installed wheel."""
    digest = hashlib.sha256()
    root = _PACKAGE_DIR
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".yaml") and "__pycache__" not in path.parts:
            digest.update(f"{path.relative_to(root)}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _source_label(client: Any, tag: str) -> str | None:
    import docker.errors

    try:
        return (client.images.get(tag).labels or {}).get("agentgym.source")
    except docker.errors.ImageNotFound:
        return None


def image_matches_source(tag: str, *, client: Any = None) -> bool:
    """Whether image ``tag`` was built from the sources this process runs (its
    ``agentgym.source`` label is :func:`source_digest`); ``False`` for a missing image."""
    return _source_label(_client(client), tag) == source_digest()


_checked: set[str] = set()


def warn_if_stale(tag: str, *, client: Any = None) -> None:
    """Warn (once per image and process) when image ``tag`` was built by :func:`build_images`
    from other sources than this process runs: its envs may then behave differently."""
    if tag in _checked:
        return
    _checked.add(tag)
    label = _source_label(_client(client), tag)
    if label is not None and label != source_digest():
        warnings.warn(
            f"image {tag} was built from other agentgym sources than this process "
            f"runs, so its envs may behave differently: rebuild it with "
            f"`{build_command(tag)}`",
            SandboxWarning,
            stacklevel=2,
        )


def build_base_image(
    tag: str = OFFLINE_BASE_IMAGE, *, packages: Sequence[str] = (), rebuild: bool = False, client: Any = None
) -> str:
    """Build the offline base image (Debian bookworm minbase + python3 + venv, ~220 MB, ~50 s;
    plus ``packages``) unless it exists; returns ``tag``. Needs mmdebstrap, apt access to a
    Debian mirror, and docker. Holds the host's :data:`BUILD_LOCK`."""
    with host_lock(BUILD_LOCK):
        if not rebuild and image_exists(tag, client=client):
            return tag
        if shutil.which("mmdebstrap") is None:
            raise SandboxError(
                "building the offline base image needs mmdebstrap (apt-get install -y mmdebstrap)"
            )
        proc = subprocess.run(
            ["bash", str(containers_dir() / "base" / "build.sh"), tag, *packages],
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        raise SandboxError(f"containers/base/build.sh failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return tag


_WHEEL_EPOCH = "315532800"  # 1980-01-01T00:00Z, the earliest time a zip entry can hold


def build_wheelhouse(dest: Path, extras: Sequence[str] = ()) -> list[Path]:
    """``pip wheel`` agentgym (with ``extras``) and its dependencies into ``dest``; the wheels.
    Dependencies come from the host's pip configuration (index, cache, find-links). The same
    sources give the same bytes (the wheels' file times are ``SOURCE_DATE_EPOCH``, 1980 unless
    set), so that an image build finds its wheels layer in Docker's cache. Only the sources go in:
    setuptools builds in a fresh directory, not in the tree's ``build/``, from which it would
    also copy a module deleted since an earlier build."""
    project = containers_dir().parent
    requirement = f"{project}[{','.join(sorted(extras))}]" if extras else str(project)
    with tempfile.TemporaryDirectory(prefix="agentgym-wheel-") as scratch:
        # setuptools reads this file after the project's own configuration
        config = Path(scratch) / "setup.cfg"
        config.write_text(f"[build]\nbuild_base = {scratch}/build\n[egg_info]\negg_base = {scratch}\n")
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-build-isolation",
                "--wheel-dir",
                str(dest),
                requirement,
            ],
            capture_output=True,
            text=True,
            check=False,
            env={"SOURCE_DATE_EPOCH": _WHEEL_EPOCH, **os.environ, "DIST_EXTRA_CONFIG": str(config)},
        )
    if proc.returncode != 0:
        raise SandboxError(f"pip wheel failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return sorted(dest.glob("*.whl"))


def _image_extras(name: str) -> tuple[str, ...]:
    """The extras of agentgym that image ``name`` installs: :data:`IMAGE_EXTRAS`, else those
    that the envs of family ``name`` declare."""
    if name in IMAGE_EXTRAS:
        return IMAGE_EXTRAS[name]
    return tuple(sorted({e for m in list_envs().values() if m.family == name for e in m.extras}))


def build_images(
    families: Sequence[str] | None = None,
    *,
    base_image: str = DEFAULT_BASE_IMAGE,
    tag: str = __version__,
    client: Any = None,
    stale_only: bool = False,
    log: Callable[[str], None] | None = None,
) -> dict[str, str]:
    """Build ``agentgym/<family>:<tag>`` (and ``:latest``) for each family, or ``harness``
    (default: every one of :func:`image_families`); returns ``{family: image}``.

    ``base_image`` is the ``BASE_IMAGE`` build argument; :data:`OFFLINE_BASE_IMAGE` is built
    first if missing. ``stale_only``: leave out the images that already run this checkout's
    sources (:func:`image_matches_source`). Each image is built holding the host's
    :data:`BUILD_LOCK`, so processes that need the same images at once build each once: a
    later one, with ``stale_only``, waits for the image being built and then finds it current.
    Raises :class:`SandboxError` with the build log's tail on failure.
    """
    client = _client(client)
    say = log or (lambda _msg: None)
    available = image_families()
    families = list(families or available)
    unknown = sorted(set(families) - set(available))
    if unknown:
        raise SandboxError(
            f"no Dockerfile for {unknown} in {containers_dir()}; families with one: {available}"
        )

    def current(family: str) -> bool:
        if not stale_only:
            return False
        with host_lock(BUILD_LOCK):  # (waits while another process builds)
            return image_matches_source(f"agentgym/{family}:{tag}", client=client)

    todo = [f for f in families if not current(f)]
    if todo and base_image == OFFLINE_BASE_IMAGE:
        say(f"base image {base_image}")
        build_base_image(base_image, client=client)
    source = source_digest()
    with tempfile.TemporaryDirectory(prefix="agentgym-build-") as tmp:
        context = Path(tmp)
        if todo:
            wheels = build_wheelhouse(context / "wheels", sorted({e for f in todo for e in _image_extras(f)}))
            say(f"wheelhouse: {len(wheels)} wheels")
        for family in todo:
            with host_lock(BUILD_LOCK):
                if not current(family):
                    _build_image(context, family, base_image, tag, source, client, say)
    return {f: f"agentgym/{f}:{tag}" for f in families}


def _build_image(
    context: Path,
    family: str,
    base_image: str,
    tag: str,
    source: str,
    client: Any,
    say: Callable[[str], None],
) -> None:
    """Build ``agentgym/<family>:<tag>`` from the build context ``context`` (with its wheels)."""
    import docker.errors

    shutil.copytree(containers_dir() / family, context / family)
    image = f"agentgym/{family}:{tag}"
    own_extras = _image_extras(family)
    requirement = f"agentgym[{','.join(own_extras)}]" if own_extras else "agentgym"
    packages = family_packages(family)
    family_base = base_image
    if base_image == OFFLINE_BASE_IMAGE and packages:
        digest = hashlib.sha256(" ".join(packages).encode()).hexdigest()[:8]
        family_base = f"agentgym/base-{family}:bookworm-{digest}"
        say(f"base image {family_base} (+ {' '.join(packages)})")
        build_base_image(family_base, packages=packages, client=client)
    say(f"building {image} from {family_base}")
    previous = _image_id(client, image)
    try:
        built, _ = client.images.build(
            path=str(context),
            dockerfile=f"{family}/Dockerfile",
            tag=image,
            rm=True,
            forcerm=True,
            pull=False,
            buildargs={
                "BASE_IMAGE": family_base,
                "AGENTGYM_REQ": requirement,
                "APT_PACKAGES": " ".join(packages),
            },
            labels={
                "agentgym.image": family,
                "agentgym.version": __version__,
                "agentgym.base": family_base,
                "agentgym.source": source,
            },
        )
    except docker.errors.BuildError as exc:
        tail = "".join(str(chunk.get("stream") or chunk.get("error") or "") for chunk in exc.build_log)[
            -4000:
        ]
        hint = (
            ""
            if base_image == OFFLINE_BASE_IMAGE
            else f"\n(no registry? build offline with base_image={OFFLINE_BASE_IMAGE!r})"
        )
        raise SandboxError(f"building {image} failed: {exc.msg}\n{tail}{hint}") from exc
    built.tag(f"agentgym/{family}", "latest")
    _replaced(client, previous, built.id)
