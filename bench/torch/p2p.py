"""send/recv through torch.distributed: the "tutti" backend next to "gloo" in the same run.

Ranks 0 and 1 play ping-pong (rank 0 sends, rank 1 sends it back) while any other ranks wait
in a barrier; in a group of 3 or more ranks tutti announces each message with an envelope (so
that a receive from any rank can find it), which this measures. `--any`: rank 0 takes the
reply with a receive from any rank. Time per message is half a round trip, the best of
`--rounds` rounds; one exact check per size and backend.

    python bench/torch/p2p.py --np 3 [--any] [--min 4 --max 16M] [--rounds 3] [--json out.json]

Prints a markdown table: µs per message for each backend, and gloo / tutti.
"""

import argparse
import sys
import time
import warnings

import torch
import torch.distributed as dist

from allreduce import human, parse_bytes
from common import best_of_rounds, run_ranks, save_results

warnings.filterwarnings("ignore")


def sizes(lo, hi):
    s = lo
    while s <= hi:
        yield s
        s *= 16


def ping_pong(t, group, calls, rank, any_source):
    """Seconds per round trip between ranks 0 and 1 of `group`, over `calls` of them."""
    dist.barrier(group=group)
    start = time.perf_counter()
    if rank == 0:
        for _ in range(calls):
            dist.send(t, 1, group=group)
            dist.recv(t, None if any_source else 1, group=group)
    elif rank == 1:
        for _ in range(calls):
            dist.recv(t, 0, group=group)
            dist.send(t, 0, group=group)
    return (time.perf_counter() - start) / calls


def worker(rank, size, init, args, out):
    import tutti_torch  # noqa: F401
    dist.init_process_group("tutti", init_method=init, rank=rank, world_size=size)
    groups = {"tutti": None, "gloo": dist.new_group(backend="gloo")}
    results = []
    for nbytes in sizes(args.min, args.max):
        t = torch.ones(max(1, nbytes // 4))
        calls, trips = best_of_rounds(
            groups, lambda g, calls: ping_pong(t, g, calls, rank, args.any), args, 2)
        best = {k: v / 2 for k, v in trips.items()}  # a message: half a round trip
        for name, g in groups.items():
            c = torch.full(t.shape, 7.0) if rank == 0 else torch.zeros(t.shape)
            if rank == 0:
                dist.send(c, 1, group=g)
            elif rank == 1:
                dist.recv(c, None if args.any else 0, group=g)
                if not torch.all(c == 7.0):
                    raise SystemExit(f"{name}: wrong message at {nbytes} bytes")
        results.append({"bytes": nbytes, "calls": calls,
                        **{f"{k}_us": v * 1e6 for k, v in best.items()}})
        if rank == 0:
            print(f"  {human(nbytes):>8}: tutti {best['tutti'] * 1e6:10.2f} us, "
                  f"gloo {best['gloo'] * 1e6:10.2f} us ({calls} round trips x {args.rounds})",
                  file=sys.stderr, flush=True)
    save_results(out, rank, results, np=size, any=args.any)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--np", type=int, default=3)
    p.add_argument("--any", action="store_true", help="rank 0 receives from any rank")
    p.add_argument("--min", type=parse_bytes, default=4)
    p.add_argument("--max", type=parse_bytes, default=16 << 20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=0.25, help="per round and backend")
    p.add_argument("--max-calls", type=int, default=20000)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    if args.np < 2:
        raise SystemExit("--np must be at least 2")
    data = run_ranks(worker, args)
    print(f"send/recv through torch.distributed, {data['np']} ranks"
          f"{', rank 0 receiving from any rank' if data['any'] else ''}, torch {data['torch']}, "
          f"tutti over {data['transport']}: µs per message (half a round trip)\n")
    print("| bytes | tutti | gloo | gloo / tutti |")
    print("|---|---:|---:|---:|")
    for r in data["results"]:
        print(f"| {human(r['bytes'])} | {r['tutti_us']:.1f} | {r['gloo_us']:.1f} | "
              f"{r['gloo_us'] / r['tutti_us']:.2f} |")


if __name__ == "__main__":
    main()
