"""What to create: a backend, an image and limits (:class:`SandboxSpec`), and the factory."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from agentgym._version import __version__
from agentgym.registry import EnvManifest, manifest
from agentgym.sandbox.base import Sandbox
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
    key)."""

    backend: Backend = "local"
    image: str | None = None
    limits: SandboxLimits = field(default_factory=SandboxLimits)

    @classmethod
    def for_env(
        cls, env: EnvManifest | str, backend: Backend = "docker", **limit_overrides: Any
    ) -> SandboxSpec:
        """The spec that runs an env (a manifest or a registered id): its limits from the
        manifest's resources, and for ``docker`` its image (:func:`image_for`)."""
        m = manifest(env) if isinstance(env, str) else env
        return cls(backend, image_for(m) if backend == "docker" else None, limits_for(m, **limit_overrides))

    def create(self, *, session: str | None = None) -> Sandbox:
        """A new, not yet started sandbox."""
        return create_sandbox(self.backend, image=self.image, limits=self.limits, session=session)
