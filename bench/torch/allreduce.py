"""all_reduce through torch.distributed: the "tutti" backend next to "gloo" in the same run.

Both groups live in the same processes (the world on one backend, a second group on the
other); for each size the two alternate, `--rounds` times each, and the best round counts.
Time per call is the maximum over ranks of a rank's mean over the round's calls; float32 sum,
in place (repeated sums of ones grow to inf: the values do not matter to the time); one exact
check per size and backend after the rounds.

    python bench/torch/allreduce.py --np 2 [--min 4 --max 256M] [--rounds 3] [--json out.json]

Prints a markdown table: time per call (µs) for each backend, and gloo / tutti.

With --launched, this process is one rank that a launcher started (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT: torchrun, or bench/netns/compare_hosts.sh's torch_* entries across
simulated hosts), running one backend (--backend): rank 0 prints tutti-bench's --csv rows
(impl,ranks,bytes,time_us,algbw,busbw,wrong), sizes doubling from -b to -e, -n calls per size
(default about 0.2 s), time the slowest rank's mean, then one exact check per size. There
--collective all_gather or reduce_scatter times all_gather_into_tensor or
reduce_scatter_tensor (FSDP's), each size the whole gathered or scattered vector (as
tutti-bench counts it), out of place.
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


def timed(call, group, calls):
    """Seconds per `call()`, after a barrier on `group`."""
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls


def launched_call(collective, nbytes, rank, size):
    """(call, fill, wrong): the timed call of `collective` on a vector of `nbytes` in all (an
    all_reduce of it; an all_gather or reduce_scatter of it in blocks of one per rank), what
    sets its exact-check input, and how many of its output elements are wrong after that."""
    if collective == "all_reduce":
        t = torch.ones(max(1, nbytes // 4))

        def fill(check):  # repeated sums of ones grow to inf: the values do not matter to the time
            t.fill_(float(rank + 1) if check else 1.0)

        def wrong():
            return int((t != size * (size + 1) / 2).sum().item())

        return (lambda: dist.all_reduce(t)), fill, wrong
    per = max(1, nbytes // 4 // size)  # elements per rank's block
    if collective == "all_gather":
        inp, out = torch.full((per,), float(rank + 1)), torch.empty(per * size)
        want = torch.arange(1, size + 1, dtype=torch.float32).repeat_interleave(per)

        def call():
            dist.all_gather_into_tensor(out, inp)
    else:  # reduce_scatter: block j of every rank's input holds j + 1, so rank r gets the sum
        inp = torch.arange(1, size + 1, dtype=torch.float32).repeat_interleave(per)
        out = torch.empty(per)
        want = torch.full((per,), float(size * (rank + 1)))

        def call():
            dist.reduce_scatter_tensor(out, inp)

    return call, (lambda check: out.fill_(-1.0)), (lambda: int((out != want).sum().item()))


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
            return timed(lambda: dist.all_reduce(t, group=g), g, calls)

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


def launched(args):
    """One rank of a launched world, one backend; rank 0 prints CSV rows (see the docstring)."""
    import json

    import tutti_torch

    dist.init_process_group(args.backend, init_method="env://")
    rank, size = dist.get_rank(), dist.get_world_size()
    impl = f"tutti:{tutti_torch.transport()}" if args.backend == "tutti" else args.backend
    rows = []
    nbytes = args.min
    bus = (2 if args.collective == "all_reduce" else 1) * (size - 1) / size  # busbw ÷ algbw
    while nbytes <= args.max:
        call, fill, count_wrong = launched_call(args.collective, nbytes, rank, size)
        fill(False)
        timed(call, None, 5)  # warm up (connections, buffers)
        calls = args.iters
        if calls is None:  # about 0.2 s; every rank makes the slowest rank's estimate
            est = torch.tensor([timed(call, None, 2)], dtype=torch.float64)
            dist.all_reduce(est, op=dist.ReduceOp.MAX)
            calls = int(min(args.max_calls, max(args.min_calls, 0.2 / est.item())))
        fill(False)
        dt = torch.tensor([timed(call, None, calls)], dtype=torch.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        fill(True)
        call()
        wrong = count_wrong()
        us = dt.item() * 1e6
        algbw = nbytes / us / 1e3  # GB/s, as nccl-tests
        rows.append({"bytes": nbytes, "calls": calls, "time_us": us, "wrong": wrong})
        if rank == 0:
            print(f"{impl},{size},{nbytes},{us:.2f},{algbw:.3f},{algbw * bus:.3f},{wrong}",
                  flush=True)
        nbytes *= 2
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"impl": impl, "np": size, "torch": torch.__version__,
                       "collective": args.collective, "results": rows}, f)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--launched", action="store_true",
                   help="one rank of a world a launcher started (env://), CSV rows on rank 0")
    p.add_argument("--backend", choices=("tutti", "gloo"), default="tutti",
                   help="with --launched: the backend to run")
    p.add_argument("--collective", choices=("all_reduce", "all_gather", "reduce_scatter"),
                   default="all_reduce",
                   help="with --launched: all_reduce, all_gather_into_tensor or "
                        "reduce_scatter_tensor (sizes: the whole vector)")
    p.add_argument("-n", "--iters", type=int, help="with --launched: calls per size")
    p.add_argument("-a", type=int, choices=(3,), default=3,
                   help="with --launched: the time is the slowest rank's mean (3, as tutti-bench)")
    p.add_argument("--csv", action="store_true", help="with --launched: CSV rows (the only form)")
    p.add_argument("--np", type=int, default=2)
    p.add_argument("-b", "--min", type=parse_bytes, default=4)
    p.add_argument("-e", "--max", type=parse_bytes, default=256 << 20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=0.25, help="per round and backend")
    p.add_argument("--min-calls", type=int, default=2)
    p.add_argument("--max-calls", type=int, default=20000)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    if args.launched:
        return launched(args)
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
