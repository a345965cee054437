"""tutti as a torch.distributed backend.

``import tutti_torch`` registers the backend ``"tutti"`` for CPU tensors; then
``torch.distributed.init_process_group("tutti")`` works with ``env://``, ``tcp://``,
``file://`` and under torchrun. Every rank on one host: ``tutti::shm``; across hosts:
``tutti::gloo``. ``TUTTI_TORCH_TRANSPORT=shm|gloo`` forces one.
"""

import atexit

import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as dist

from . import _C

__all__ = ["transport"]


def _create(store, rank, size, timeout):
    return _C.create_backend(store, rank, size, timeout)


if "TUTTI" not in dist.Backend._plugins:  # importing twice registers once
    dist.Backend.register_backend("tutti", _create, devices=["cpu"])


# Before the interpreter finalizes: finish every group's posted calls and stop its threads
# (a thread releasing the last reference to a tensor needs the GIL, which finalization ends).
atexit.register(_C.shutdown_all)


def transport(group=None):
    """``"shm"``, ``"gloo"`` or ``"cluster"``: what the tutti backend of ``group`` (default: the
    world) runs over."""
    pg = group if group is not None else dist.group.WORLD
    return _C.transport(pg._get_backend(torch.device("cpu")))
