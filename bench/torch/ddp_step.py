"""DDP's communication per step on "tutti" and on "gloo", in the same run: a 25.2M-parameter
model (24 nn.Linear(1024, 1024)), batch 8, SGD. A step's communication is its time minus the
time of the same step under no_sync() (forward, backward and optimizer alike, no all-reduce).
Each backend trains its own DDP copy of the model in the same processes; the three kinds of
step (tutti, gloo, no_sync) alternate, and each figure is the median over the steps.

A fourth copy runs DDP with a communication hook that returns its bucket untouched ("no-op
hook"): its step minus the no_sync step is what DDP costs without any all-reduce (copying
gradients into buckets and back), the floor under every backend's figure. --bucket-view runs
every copy with gradient_as_bucket_view=True (gradients live in the buckets: no copies).

    python bench/torch/ddp_step.py --np 2 [--steps 20] [--bucket-view] [--json out.json]
"""

import argparse
import json
import statistics
import time
import warnings

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from common import run_ranks

warnings.filterwarnings("ignore")


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(24)])


def worker(rank, size, init, args, out):
    import tutti_torch  # noqa: F401
    torch.set_num_threads(1)
    dist.init_process_group("tutti", init_method=init, rank=rank, world_size=size)
    gloo = dist.new_group(backend="gloo")
    kw = {"gradient_as_bucket_view": args.bucket_view}
    nets = {"tutti": DDP(model(), **kw), "gloo": DDP(model(), process_group=gloo, **kw),
            "noop": DDP(model(), **kw)}

    def noop(state, bucket):
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut
    nets["noop"].register_comm_hook(None, noop)
    params = sum(p.numel() for p in nets["tutti"].parameters())
    opts = {k: torch.optim.SGD(v.parameters(), lr=1e-4) for k, v in nets.items()}
    x = torch.randn(8, 1024)

    def step(name, sync):
        net, opt = nets[name], opts[name]
        dist.barrier(group=gloo)
        start = time.perf_counter()
        opt.zero_grad()
        if sync:
            net(x).square().mean().backward()
        else:
            with net.no_sync():
                net(x).square().mean().backward()
        opt.step()
        return time.perf_counter() - start

    times = {"tutti": [], "gloo": [], "noop": [], "no_sync": []}
    for i in range(args.warmup + args.steps):
        t = {"tutti": step("tutti", True), "gloo": step("gloo", True),
             "noop": step("noop", True), "no_sync": step("tutti", False)}
        if i >= args.warmup:
            for k, v in t.items():
                # the slowest rank's step time
                m = torch.tensor([v], dtype=torch.float64)
                dist.all_reduce(m, op=dist.ReduceOp.MAX, group=gloo)
                times[k].append(m.item())
    if rank == 0:
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        with open(out, "w") as f:
            json.dump({"np": size, "params": params, "steps": args.steps, "median_ms": med,
                       "transport": tutti_torch.transport(), "bucket_view": args.bucket_view},
                      f)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--bucket-view", action="store_true",
                   help="gradient_as_bucket_view=True on every DDP copy")
    p.add_argument("--json")
    args = p.parse_args()
    data = run_ranks(worker, args)
    m = data["median_ms"]
    comm = {k: m[k] - m["no_sync"] for k in ("tutti", "gloo", "noop")}
    view = ", gradient_as_bucket_view" if args.bucket_view else ""
    print(f"\nDDP step, {data['params'] / 1e6:.1f}M parameters, batch 8, {args.np} ranks{view}, "
          f"tutti over {data['transport']}; median of {args.steps} steps (ms)\n")
    print("| | step | no_sync step | communication per step |")
    print("|---|---:|---:|---:|")
    for k in ("gloo", "tutti", "noop"):
        print(f"| {k} | {m[k]:.1f} | {m['no_sync']:.1f} | {comm[k]:.1f} |")
    print(f"\ngloo / tutti communication: {comm['gloo'] / max(comm['tutti'], 1e-9):.2f}x; "
          f"the all-reduces alone (less the no-op hook's): "
          f"{(comm['gloo'] - comm['noop']) / max(comm['tutti'] - comm['noop'], 1e-9):.2f}x")


if __name__ == "__main__":
    main()
