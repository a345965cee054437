"""DDP on "tutti" against DDP on "gloo": the same model, data and options trained for K steps
in the same processes end with identical parameters at 2 ranks and within 1e-6 relative at 3-4
(sums in another order round differently). Options: plain, no_sync accumulation,
find_unused_parameters, static_graph, the fp16 compression hook, join with uneven inputs,
and sparse gradients (an nn.Embedding(sparse=True): DDP all-reduces them as sparse tensors).

    python tests/torch/test_ddp.py        # world sizes 2-4 (TUTTI_TORCH_SIZES=2)
"""

import copy
import warnings

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import harness
import tutti_torch  # noqa: F401  (registers "tutti")

warnings.filterwarnings("ignore")
STEPS = 6


class Net(torch.nn.Module):
    def __init__(self, unused=False):
        super().__init__()
        self.a = torch.nn.Linear(8, 32)
        self.b = torch.nn.Linear(32, 4)
        self.spare = torch.nn.Linear(32, 4) if unused else None  # never used in forward

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class SparseNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 8, sparse=True)
        self.out = torch.nn.Linear(8, 4)

    def forward(self, idx):
        return self.out(self.emb(idx).sum(1))


def batches(rank, n, sparse=False):
    if sparse:  # 16 samples of 5 row indices each: ranks touch different, overlapping rows
        g = torch.Generator().manual_seed(2000 + rank)
        return [(torch.randint(0, 50, (16, 5), generator=g), torch.randn(16, 4, generator=g))
                for _ in range(n)]

    g = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)) for _ in range(n)]


def train(model, group, rank, scenario):
    kw = {"process_group": group}
    if scenario == "find_unused_parameters":
        kw["find_unused_parameters"] = True
    if scenario == "static_graph":
        kw["static_graph"] = True
    ddp = DDP(model, **kw)
    if scenario == "fp16_hook":
        ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
    # torch's SGD takes sparse gradients without momentum only
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.0 if scenario == "sparse" else 0.9)
    loss_fn = torch.nn.MSELoss()

    def step(x, y):
        loss_fn(ddp(x), y).backward()

    if scenario == "no_sync":
        data = batches(rank, 2 * STEPS)
        for i in range(STEPS):
            opt.zero_grad()
            with ddp.no_sync():
                step(*data[2 * i])
            step(*data[2 * i + 1])
            opt.step()
    elif scenario == "join":
        # rank r has STEPS + r batches: the others run out first and shadow its all-reduces
        with ddp.join():
            for x, y in batches(rank, STEPS + rank):
                opt.zero_grad()
                step(x, y)
                opt.step()
    else:
        for x, y in batches(rank, STEPS, sparse=scenario == "sparse"):
            opt.zero_grad()
            step(x, y)
            opt.step()
    return [p.detach().clone() for p in model.parameters()]


def run(rank, size, init):
    dist.init_process_group("tutti", init_method=init, rank=rank, world_size=size)
    gloo = dist.new_group(backend="gloo")
    for scenario in ["plain", "no_sync", "find_unused_parameters", "static_graph", "fp16_hook",
                     "join", "sparse"]:
        torch.manual_seed(0)
        model = SparseNet() if scenario == "sparse" else \
            Net(unused=scenario == "find_unused_parameters")
        on_tutti = train(copy.deepcopy(model), None, rank, scenario)
        on_gloo = train(copy.deepcopy(model), gloo, rank, scenario)
        start = [p.detach() for p in model.parameters()]
        # fp16_hook sums float16 gradients: each addition rounds to 11 bits, so another order
        # of additions (tutti's schedule vs gloo's ring) moves results by up to float16's unit
        # roundoff (2^-11, 4.9e-4); float32 sums by float32's.
        harness.check_trained(scenario, size, start, on_tutti, on_gloo,
                              bound=1e-3 if scenario == "fp16_hook" else 1e-6)
    dist.destroy_process_group()


if __name__ == "__main__":
    harness.main([run], sizes=[2, 3, 4])
