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
