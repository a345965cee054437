"""torch's "Writing Distributed Applications" tutorial, CPU: the training loop that
all-reduces each parameter's gradient and divides by the world size. Meets through tcp://
(rank 0 serves the store): `python average_gradients.py BACKEND RANK WORLD PORT`.
Prints one line on rank 0: the parameters' checksum after training."""

import sys

import torch
import torch.distributed as dist

backend, rank, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
# No `import tutti_torch`: torch loads it itself (its "torch.backends" entry point), so the
# backend string is the only change from the gloo version.

dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=world)


def average_gradients(model):
    size = float(dist.get_world_size())
    for param in model.parameters():
        dist.all_reduce(param.grad.data, op=dist.ReduceOp.SUM)
        param.grad.data /= size


torch.manual_seed(1234)
model = torch.nn.Sequential(torch.nn.Linear(10, 50), torch.nn.ReLU(), torch.nn.Linear(50, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
g = torch.Generator().manual_seed(rank)
for step in range(20):
    x, y = torch.randn(32, 10, generator=g), torch.randint(0, 10, (32,), generator=g)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    average_gradients(model)
    opt.step()

total = sum(p.double().sum().item() for p in model.parameters())
if rank == 0:
    print(f"checksum {total:.12e}", flush=True)
dist.destroy_process_group()
