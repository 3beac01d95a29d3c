"""Data-parallel learning on torch.distributed: the ranks of a ``torchrun`` launch and what the
learner's replicas exchange.

Under ``torchrun --nproc-per-node N -m agentgym.cli train ...`` every process runs ``agentgym
train``. Rank 0 is the run, as one process would be: it collects the episodes, assigns credit,
evaluates, logs, writes the checkpoints and pushes the weights. Every other rank holds a replica
of the learner (:meth:`~agentgym.trainers.learner.Learner.follow`): it takes rank 0's learner
state once, then the rows of each update as rank 0 sends them (:meth:`World.send`), until rank 0
stops (:meth:`World.leading`). Every rank runs the same mini-batch schedule and computes the
gradient of its share of each mini-batch (:meth:`World.share`), weighted by the whole
mini-batch's token or row count; the sum over the ranks (:meth:`World.sum_gradients`) is then the
one-process gradient of the whole mini-batch, and every rank takes the same optimizer step.

With ``learner.fsdp=true`` the ranks hold shards instead of replicas (:func:`shard`, FSDP2): each
keeps 1/size of every parameter, gradient and optimizer state, and every pass of the model is a
collective that all ranks run together, so rank 0 has the others run each of its learner calls
that touches the model, not just the updates (:meth:`~agentgym.trainers.learner.Learner.follow`).

The backend follows the learner's device: gloo on the CPU, NCCL on GPUs (each rank on the GPU of
its ``LOCAL_RANK``). Without ``WORLD_SIZE`` (no torchrun) or with one process nothing is
initialized and every exchange is a no-op. Every collective waits at most ``timeout_s``: a rank
whose peers died or hang fails instead of waiting forever. The ranks trust each other: what rank
0 sends is unpickled.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, cast

import torch
import torch.distributed as dist

__all__ = ["DEFAULT_TIMEOUT_S", "Stopped", "World", "full", "is_shard", "local_launch", "shard"]

#: Seconds a rank waits in one collective (the other ranks: for rank 0's next update, which
#: comes after a whole step's collection and evaluation) before it fails.
DEFAULT_TIMEOUT_S = 1800.0

#: Gradients are summed in buckets of at most this many elements (256 MiB of float32).
_BUCKET = 1 << 26

#: The variables torchrun sets for each process that this module reads (and torch's ``env://``).
_LAUNCH_VARS = ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class Stopped(Exception):
    """Raised by :meth:`World.receive` when rank 0 has stopped: the follower's work is done."""


class _Stop:
    """What rank 0 sends when it stops."""


@dataclass(frozen=True)
class World:
    """This process's place among the ranks; ``World()`` is one process alone."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    """The rank among this node's processes: its GPU under NCCL."""
    backend: str | None = None
    """``"gloo"`` or ``"nccl"``; ``None`` for one process."""
    timeout_s: float = DEFAULT_TIMEOUT_S

    @classmethod
    def from_env(cls, device: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S) -> World:
        """The world of the variables torchrun sets (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``,
        ``MASTER_ADDR``, ``MASTER_PORT``) for a learner on ``device`` (``learner.device``); one
        process when ``WORLD_SIZE`` is unset or 1. Initializes nothing (:meth:`join` does).
        ``ValueError`` for an incomplete or inconsistent launch, or a device the ranks cannot
        train on (:meth:`device`)."""
        size = _int_env("WORLD_SIZE", 1)
        if size == 1:
            return cls()
        if size < 1:
            raise ValueError(f"WORLD_SIZE must be >= 1, got {size}")
        missing = [name for name in _LAUNCH_VARS if not os.environ.get(name)]
        if missing:
            raise ValueError(
                f"WORLD_SIZE={size} is set but {', '.join(missing)} not: start the ranks with torchrun "
                f"(torchrun --nproc-per-node {size} -m agentgym.cli train ...)"
            )
        rank, local_rank = _int_env("RANK", 0), _int_env("LOCAL_RANK", 0)
        if not 0 <= rank < size or not 0 <= local_rank < size:
            raise ValueError(f"RANK={rank} and LOCAL_RANK={local_rank} must be in [0, WORLD_SIZE={size})")
        if timeout_s <= 0:
            raise ValueError(f"the ranks' timeout must be > 0 s, got {timeout_s}")
        world = cls(rank, size, local_rank, None, timeout_s)
        return replace(world, backend="nccl" if world.device(device).type == "cuda" else "gloo")

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the one that runs the training loop."""
        return self.rank == 0

    def device(self, setting: str) -> torch.device:
        """The device of ``learner.device=setting`` on this rank. ``auto`` is CUDA when there is
        one, else the CPU. Among several ranks, CUDA means this rank's GPU (``cuda:LOCAL_RANK``,
        NCCL), and ``ValueError`` says why another setting cannot work (no CUDA, a fixed GPU
        index, not enough GPUs, a device other than cpu and cuda)."""
        if setting == "auto":
            setting = "cuda" if torch.cuda.is_available() else "cpu"
        device = torch.device(setting)
        if self.size == 1 or device.type == "cpu":
            return device
        if device.type != "cuda":
            raise ValueError(f"torchrun training runs on cpu (gloo) or cuda (NCCL), not {setting!r}")
        if not torch.cuda.is_available():
            raise ValueError(
                f"learner.device={setting} trains on the GPUs with NCCL, and this machine has no CUDA "
                "device: use learner.device=cpu (gloo)"
            )
        if device.index is not None:
            raise ValueError(
                f"under torchrun each rank trains on the GPU of its LOCAL_RANK: set learner.device=cuda "
                f"(or auto), not {setting}"
            )
        if self.local_rank >= torch.cuda.device_count():
            raise ValueError(
                f"LOCAL_RANK={self.local_rank} but this node has {torch.cuda.device_count()} GPU(s): "
                "start at most one rank per GPU (--nproc-per-node)"
            )
        return torch.device("cuda", self.local_rank)

    def join(self) -> World:
        """Initialize torch.distributed's default process group for this world, once per
        process (it is destroyed at exit); nothing for one process. Returns ``self``."""
        if self.size > 1 and not dist.is_initialized():
            assert self.backend is not None, "a world of several ranks comes from from_env"
            if self.backend == "nccl":
                torch.cuda.set_device(self.local_rank)
            dist.init_process_group(
                self.backend, rank=self.rank, world_size=self.size, timeout=timedelta(seconds=self.timeout_s)
            )
            atexit.register(dist.destroy_process_group)
        return self

    # --- rank 0 hands out work -----------------------------------------------------------------

    def send(self, work: Any) -> None:
        """Rank 0: hand ``work`` (picklable) to every other rank's :meth:`receive`; nothing for
        one process."""
        if self.size > 1:
            dist.broadcast_object_list([work], src=0)

    def receive(self) -> Any:
        """A rank other than 0: what rank 0 sends next. :class:`Stopped` when rank 0 stopped;
        ``RuntimeError`` when nothing came within ``timeout_s`` or rank 0 is gone."""
        box: list[Any] = [None]
        try:
            dist.broadcast_object_list(box, src=0)
        except RuntimeError as exc:  # gloo's timeout or a closed connection; NCCL's watchdog
            raise RuntimeError(
                f"rank {self.rank}: rank 0 sent no work within {self.timeout_s:g} s "
                f"(learner.dist_timeout_s), or it is gone: {exc}"
            ) from exc
        if isinstance(box[0], _Stop):
            raise Stopped
        return box[0]

    @contextlib.contextmanager
    def leading(self) -> Iterator[None]:
        """Rank 0's run: leaving it, also by an exception, stops the other ranks' :meth:`receive`
        (after an exception, a rank that is already gone does not matter)."""
        try:
            yield
        except BaseException:
            with contextlib.suppress(RuntimeError):
                self.send(_Stop())
            raise
        self.send(_Stop())

    # --- the data-parallel update --------------------------------------------------------------

    def share(self, weights: Sequence[int]) -> list[int]:
        """This rank's positions among items of these ``weights`` (their tokens): a contiguous
        run, item i going to the rank whose 1/size of the total weight holds the middle of item
        i, so that each rank's weight is near total/size and neighbours (rows that share a
        prompt) stay together. Every position goes to exactly one rank; with fewer items than
        ranks some ranks get none."""
        if self.size == 1:
            return list(range(len(weights)))
        total, before, mine = max(sum(weights), 1), 0, []
        for position, weight in enumerate(weights):
            if min(self.size - 1, (2 * before + weight) * self.size // (2 * total)) == self.rank:
                mine.append(position)
            before += weight
        return mine

    def sum_gradients(
        self, params: Sequence[torch.nn.Parameter], metrics: dict[str, float], device: torch.device
    ) -> dict[str, float]:
        """Replace each parameter's gradient by its sum over the ranks (a missing gradient counts
        as zeros: a rank with no share of the mini-batch), and return ``metrics`` summed over the
        ranks likewise, in the same collectives (on ``device``); nothing for one process."""
        if self.size == 1:
            return metrics
        grads = []
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
        totals = torch.tensor(list(metrics.values()), dtype=torch.float64, device=device)
        self._all_reduce([*grads, totals])
        return dict(zip(metrics, totals.tolist()))

    def most(self, count: int, device: torch.device) -> int:
        """The largest ``count`` of any rank (each rank gives its own); ``count`` in one process."""
        if self.size == 1:
            return count
        value = torch.tensor([count], dtype=torch.int64, device=device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return int(value.item())

    def _all_reduce(self, tensors: Sequence[torch.Tensor]) -> None:
        """Sum ``tensors`` over the ranks in place: one collective per bucket of tensors of one
        dtype and device, of at most :data:`_BUCKET` elements."""
        buckets: dict[tuple[torch.dtype, torch.device], list[list[torch.Tensor]]] = {}
        filled: dict[tuple[torch.dtype, torch.device], int] = {}  # elements in each key's last bucket
        for t in tensors:
            key = (t.dtype, t.device)
            runs = buckets.setdefault(key, [[]])
            if runs[-1] and filled[key] + t.numel() > _BUCKET:
                runs.append([])
                filled[key] = 0
            runs[-1].append(t)
            filled[key] = filled.get(key, 0) + t.numel()
        for bucket in (b for runs in buckets.values() for b in runs):
            flat = torch.cat([t.reshape(-1) for t in bucket])
            dist.all_reduce(flat)
            for t, part in zip(bucket, flat.split([t.numel() for t in bucket])):
                t.copy_(part.view_as(t))


def shard(model: torch.nn.Module, device: torch.device) -> None:
    """Shard ``model`` (a transformers model, or a PEFT model around one) over the ranks of the
    default process group with FSDP2: one unit per decoder layer (the model's
    ``_no_split_modules``), the rest in the root. Gradients come out as the mean over the ranks
    (gloo has no pre-scaled sum). Full tensors given to ``load_state_dict`` load into the shards
    (each rank keeps its part, with no communication), so checkpoints and pushed weights keep
    one format whatever the number of ranks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    base = cast(Any, model).get_base_model() if hasattr(model, "get_base_model") else model
    layers = set(getattr(base, "_no_split_modules", None) or ())
    if not layers:
        raise ValueError(
            f"learner.fsdp: {type(base).__name__} names no decoder layer class (_no_split_modules)"
        )
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for module in list(model.modules()):
        if type(module).__name__ in layers:
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.register_load_state_dict_pre_hook(_into_shards)


def _into_shards(module: torch.nn.Module, state_dict: dict[str, Any], prefix: str, *_: Any) -> None:
    """Before a sharded ``module`` loads ``state_dict``: its full tensors become this rank's shards."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    current = module.state_dict()
    for key, value in list(state_dict.items()):
        target = current.get(key.removeprefix(prefix))
        if isinstance(target, DTensor) and not isinstance(value, DTensor):
            state_dict[key] = distribute_tensor(
                value.to(target.device), target.device_mesh, target.placements, src_data_rank=None
            )


def is_shard(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is this rank's shard of a sharded one (a DTensor)."""
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole of a sharded tensor (a collective: every rank gathers it, in the same order);
    any other tensor as it is."""
    return cast(Any, tensor).full_tensor() if is_shard(tensor) else tensor


def local_launch(ranks: int) -> dict[str, str]:
    """The variables torchrun would give every process of a ``ranks``-process world on this
    machine, less each one's ``RANK`` and ``LOCAL_RANK``: a free loopback port to meet on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(ranks)}


def _int_env(name: str, default: int) -> int:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
