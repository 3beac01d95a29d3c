"""What to create: a backend, an image and limits (:class:`SandboxSpec`), and the factory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentgym._version import __version__
from agentgym.registry import EnvManifest, manifest
from agentgym.sandbox.base import Sandbox
from agentgym.sandbox.daemon import least_loaded
from agentgym.sandbox.docker import DockerSandbox
from agentgym.sandbox.limits import SandboxLimits, limits_for
from agentgym.sandbox.local import LocalSandbox

__all__ = ["Backend", "SandboxSpec", "create_sandbox", "image_for"]

Backend = Literal["local", "docker"]


def image_for(source: EnvManifest | str) -> str:
    """The image that serves an env (a manifest or a registered id): the manifest's ``image``,
    else its family's, ``agentgym/<family>:<agentgym version>`` (built by
    :func:`agentgym.sandbox.build_images`)."""
    m = manifest(source) if isinstance(source, str) else source
    return m.image or f"agentgym/{m.family}:{__version__}"


def create_sandbox(
    backend: Backend,
    *,
    image: str | None = None,
    limits: SandboxLimits | None = None,
    session: str | None = None,
    **options: Any,
) -> Sandbox:
    """A new, not yet started sandbox. ``image`` is required for ``docker`` and refused for
    ``local``; ``options`` go to the backend's constructor."""
    if backend == "local":
        if image is not None:
            raise ValueError("the local backend runs on the host and takes no image")
        return LocalSandbox(limits, session=session, **options)
    if backend == "docker":
        if image is None:
            raise ValueError("the docker backend needs an image")
        return DockerSandbox(image, limits, session=session, **options)
    raise ValueError(f"unknown sandbox backend {backend!r}; choose 'local' or 'docker'")


@dataclass(frozen=True)
class SandboxSpec:
    """Hashable recipe for interchangeable sandboxes (a :class:`~agentgym.sandbox.SandboxPool`
    key).

    ``hosts`` (``docker`` only): the Docker daemons to spread sandboxes over (URLs, see
    :mod:`agentgym.sandbox.daemon`); each new sandbox goes to the one running the fewest sandbox
    containers. Empty: the default daemon.
    """

    backend: Backend = "local"
    image: str | None = None
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    hosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.hosts and self.backend != "docker":
            raise ValueError(f"Docker hosts are for the docker backend, not {self.backend!r}")

    @classmethod
    def for_env(
        cls,
        env: EnvManifest | str,
        backend: Backend = "docker",
        *,
        hosts: Sequence[str] = (),
        **limit_overrides: Any,
    ) -> SandboxSpec:
        """The spec that runs an env (a manifest or a registered id): its limits from the
        manifest's resources, and for ``docker`` its image (:func:`image_for`) and ``hosts``."""
        m = manifest(env) if isinstance(env, str) else env
        image = image_for(m) if backend == "docker" else None
        return cls(backend, image, limits_for(m, **limit_overrides), tuple(hosts))

    def create(self, *, session: str | None = None) -> Sandbox:
        """A new, not yet started sandbox (on the least-loaded of :attr:`hosts`, if any)."""
        options = {"host": least_loaded(self.hosts)} if self.hosts else {}
        return create_sandbox(self.backend, image=self.image, limits=self.limits, session=session, **options)
