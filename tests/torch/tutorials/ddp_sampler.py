"""torch's DDP tutorial shape, CPU: DistributedSampler, a DDP training loop, rank 0 saving a
checkpoint behind a barrier that every rank then loads, and broadcast_object_list of a
state_dict. The backend is the only argument: `torchrun --nproc_per_node=2 ddp_sampler.py tutti`.
Prints one line: the parameters' checksum after training."""

import os
import sys
import tempfile

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

backend = sys.argv[1]
# No `import tutti_torch`: torch loads it itself (its "torch.backends" entry point), so the
# backend string is the only change from the gloo version.

dist.init_process_group(backend)  # env:// from torchrun
rank, world = dist.get_rank(), dist.get_world_size()

g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(256, 20, generator=g), torch.randn(256, 1, generator=g))
sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=7)
loader = DataLoader(data, batch_size=16, sampler=sampler)

torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    sampler.set_epoch(epoch)
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

# rank 0 saves; the others load once it is written
path = os.path.join(os.environ.get("TUTORIAL_DIR", tempfile.gettempdir()),
                    f"ckpt-{os.environ['MASTER_PORT']}.pt")
if rank == 0:
    torch.save(model.state_dict(), path)
dist.barrier()
model.load_state_dict(torch.load(path, map_location="cpu"))
dist.barrier()
if rank == 0:
    os.remove(path)

# rank 0's state_dict to everyone as objects
state = [model.module.state_dict() if rank == 0 else None]
dist.broadcast_object_list(state, src=0)
for k, v in model.module.state_dict().items():
    assert torch.equal(v, state[0][k]), k

total = sum(p.double().sum().item() for p in model.parameters())
if rank == 0:
    print(f"checksum {total:.12e}", flush=True)
    if backend == "tutti":  # reporting only: which tutti transport the group ran over
        import tutti_torch
        print(f"transport {tutti_torch.transport()}", flush=True)
dist.destroy_process_group()
