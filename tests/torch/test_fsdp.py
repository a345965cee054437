"""FSDP (torch's fully_shard) on "tutti" against the same on "gloo": the same model, data and
options trained for K steps in the same processes end with identical parameters at 2 ranks and
within 1e-6 relative at 3-4 (sums in another order round differently). FSDP shards every
parameter across the ranks: each step all-gathers the parameters (all_gather_into_tensor) and
reduce-scatters the gradients (reduce_scatter_tensor), the collectives tutti::hierarchical runs
in two levels on a group across hosts. Scenarios: plain, parameters kept gathered after the
forward pass (reshard_after_forward=False), and gradients accumulated over two micro-batches
without reduce-scattering the first (set_requires_gradient_sync).

    python tests/torch/test_fsdp.py        # world sizes 2 and 4 (TUTTI_TORCH_SIZES=...)
    TUTTI_TORCH_HOSTS=2 python tests/torch/test_fsdp.py   # across 2 simulated hosts
"""

import copy
import warnings

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

import harness
import tutti_torch

warnings.filterwarnings("ignore")
STEPS = 4


class Net(torch.nn.Module):
    # 33 and 5 rows: FSDP pads each parameter's shard to a whole share of dimension 0
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(12, 33)
        self.b = torch.nn.Linear(33, 5)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def batches(rank, n):
    g = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(8, 12, generator=g), torch.randn(8, 5, generator=g)) for _ in range(n)]


def train(model, group, rank, scenario):
    mesh = DeviceMesh.from_group(group, "cpu")
    keep = scenario == "no_reshard"
    for layer in (model.a, model.b):
        fully_shard(layer, mesh=mesh, reshard_after_forward=not keep)
    fully_shard(model, mesh=mesh, reshard_after_forward=not keep)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.MSELoss()
    micro = 2 if scenario == "accumulate" else 1
    data = batches(rank, micro * STEPS)
    for i in range(STEPS):
        opt.zero_grad()
        for j in range(micro):
            model.set_requires_gradient_sync(j == micro - 1)  # reduce-scatter on the last only
            x, y = data[micro * i + j]
            loss_fn(model(x), y).backward()
        opt.step()
    return [p.full_tensor().detach().clone() for p in model.parameters()]


def run(rank, size, init):
    dist.init_process_group("tutti", init_method=init, rank=rank, world_size=size)
    gloo = dist.new_group(backend="gloo")
    world = dist.group.WORLD
    want = harness.expected_transport(range(size), size)
    harness.check(tutti_torch.transport() == want,
                  f"the world runs over {tutti_torch.transport()}, expected {want}")
    for scenario in ["plain", "no_reshard", "accumulate"]:
        torch.manual_seed(0)
        model = Net()
        start = [p.detach().clone() for p in model.parameters()]
        on_tutti = train(copy.deepcopy(model), world, rank, scenario)
        on_gloo = train(copy.deepcopy(model), gloo, rank, scenario)
        harness.check_trained(scenario, size, start, on_tutti, on_gloo)
    dist.destroy_process_group()


if __name__ == "__main__":
    harness.main([run], sizes=[2, 4])
