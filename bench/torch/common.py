"""What bench/torch's programs share: running a worker on N ranks and collecting rank 0's
figures."""

import json
import os
import tempfile

import torch.multiprocessing as mp


def run_ranks(worker, args):
    """Runs worker(rank, args.np, init_method, args, out) on args.np processes meeting through a
    fresh file:// store; returns the JSON rank 0 wrote to `out`, also saved to args.json if
    given."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        mp.spawn(worker, args=(args.np, "file://" + os.path.join(d, "init"), args, out),
                 nprocs=args.np)
        with open(out) as f:
            data = json.load(f)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
    return data


def best_of_rounds(groups, time_one, args, min_calls):
    """Times each backend of `groups` ({"tutti": ..., "gloo": ...}, in the same processes):
    time_one(group, calls) gives seconds per call over `calls` calls. The calls per round are
    about args.seconds of the slower backend (rank 0's estimate, at least `min_calls`, at most
    args.max_calls); the backends alternate for args.rounds rounds; a round's time is its
    slowest rank's. Returns (calls, {backend: best seconds per call})."""
    import torch
    import torch.distributed as dist

    est = torch.tensor([0.0], dtype=torch.float64)
    for g in groups.values():
        time_one(g, 2)  # warm up
        est = torch.maximum(est, torch.tensor([time_one(g, 1)], dtype=torch.float64))
    dist.broadcast(est, 0, group=groups["gloo"])
    calls = int(min(args.max_calls, max(min_calls, args.seconds / est.item())))
    best = {}
    for _ in range(args.rounds):
        for name, g in groups.items():
            dt = torch.tensor([time_one(g, calls)], dtype=torch.float64)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX, group=groups["gloo"])
            best[name] = min(best.get(name, float("inf")), dt.item())
    return calls, best


def save_results(out, rank, results, **about):
    """Rank 0 writes the figures (and the torch version and tutti's transport) for main."""
    if rank != 0:
        return
    import torch
    import tutti_torch

    with open(out, "w") as f:
        json.dump({**about, "torch": torch.__version__, "transport": tutti_torch.transport(),
                   "results": results}, f)
