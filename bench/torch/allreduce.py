"""all_reduce through torch.distributed: the "tutti" backend next to "gloo" in the same run.

Both groups live in the same processes (the world on one backend, a second group on the
other); for each size the two alternate, `--rounds` times each, and the best round counts.
Time per call is the maximum over ranks of a rank's mean over the round's calls; float32 sum,
in place (repeated sums of ones grow to inf: the values do not matter to the time); one exact
check per size and backend after the rounds.

    python bench/torch/allreduce.py --np 2 [--min 4 --max 256M] [--rounds 3] [--json out.json]

Prints a markdown table: time per call (µs) for each backend, and gloo / tutti.
"""

import argparse
import sys
import time
import warnings

import torch
import torch.distributed as dist

from common import best_of_rounds, run_ranks, save_results

warnings.filterwarnings("ignore")


def parse_bytes(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def human(b):
    for unit, m in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= m:
            return f"{b // m} {unit}"
    return f"{b} B"


def sizes(lo, hi):
    s = lo
    while s <= hi:
        yield s
        s *= 4


def timed(t, group, calls):
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(t, group=group)
    return (time.perf_counter() - start) / calls


def worker(rank, size, init, args, out):
    import tutti_torch  # noqa: F401
    dist.init_process_group("tutti", init_method=init, rank=rank, world_size=size)
    groups = {"tutti": None, "gloo": dist.new_group(backend="gloo")}
    results = []
    for nbytes in sizes(args.min, args.max):
        n = max(1, nbytes // 4)
        t = torch.ones(n)

        def time_one(g, calls):
            t.fill_(1.0)  # repeated sums of ones grow to inf
            return timed(t, g, calls)

        calls, best = best_of_rounds(groups, time_one, args, args.min_calls)
        check = torch.full((n,), float(rank + 1))
        for name, g in groups.items():
            c = check.clone()
            dist.all_reduce(c, group=g)
            if not torch.all(c == size * (size + 1) / 2):
                raise SystemExit(f"{name}: wrong all_reduce result at {nbytes} bytes")
        results.append({"bytes": nbytes, "calls": calls,
                        **{f"{k}_us": v * 1e6 for k, v in best.items()}})
        if rank == 0:
            print(f"  {human(nbytes):>8}: tutti {best['tutti'] * 1e6:10.2f} us, "
                  f"gloo {best['gloo'] * 1e6:10.2f} us ({calls} calls x {args.rounds})",
                  file=sys.stderr, flush=True)
    save_results(out, rank, results, np=size)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--min", type=parse_bytes, default=4)
    p.add_argument("--max", type=parse_bytes, default=256 << 20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=0.25, help="per round and backend")
    p.add_argument("--min-calls", type=int, default=2)
    p.add_argument("--max-calls", type=int, default=20000)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    data = run_ranks(worker, args)
    print(f"\nall_reduce float32 sum through torch.distributed {data['torch']}, {args.np} ranks, "
          f"tutti over {data['transport']}; time per call (µs), best of {args.rounds}\n")
    print("| size | gloo | tutti | gloo / tutti |")
    print("|---:|---:|---:|---:|")
    for r in data["results"]:
        print(f"| {human(r['bytes'])} | {r['gloo_us']:.2f} | {r['tutti_us']:.2f} | "
              f"{r['gloo_us'] / r['tutti_us']:.1f}x |")


if __name__ == "__main__":
    main()
