"""What the torch tests share: running a function on N ranks, each its own process, and
failing loudly (never hanging) when a rank fails or stops answering."""

import os
import sys
import tempfile
import time
import traceback

import torch.multiprocessing as mp

# Every test is bounded: a rank that hangs fails the test after this many seconds. Generous on
# purpose (a loaded 2-core machine); tutti's own deadlines are the pg timeout passed by a test.
HANG_LIMIT_S = float(os.environ.get("TUTTI_TORCH_TEST_LIMIT_S", "600"))


def simulate_host(rank, size):
    """With TUTTI_TORCH_HOSTS=H, places this rank on one of H simulated hosts (TUTTI_HOST,
    blocks of consecutive ranks: rank * H // size), so one machine runs a group across hosts.
    Call before init_process_group."""
    if os.environ.get("TUTTI_TORCH_HOSTS"):
        os.environ["TUTTI_HOST"] = f"sim{rank * int(os.environ['TUTTI_TORCH_HOSTS']) // size}"


def expected_transport(ranks, size):
    """What the tutti backend runs a group of `ranks` (of a world of `size`) over, by
    TUTTI_TORCH_TRANSPORT and the hosts simulate_host gives: shm on one host; across hosts,
    cluster where a host has several of the group's ranks, else gloo."""
    want = os.environ.get("TUTTI_TORCH_TRANSPORT", "auto")
    if want != "auto":
        return want
    h = int(os.environ.get("TUTTI_TORCH_HOSTS", "1"))
    hosts = [r * h // size for r in ranks]
    if len(set(hosts)) == 1:
        return "shm"
    return "cluster" if len(set(hosts)) < len(hosts) else "gloo"


def _entry(rank, fn, size, init, args):
    try:
        simulate_host(rank, size)
        fn(rank, size, init, *args)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def spawn(fn, size, *args, limit_s=HANG_LIMIT_S):
    """Runs fn(rank, size, init_method, *args) on `size` processes meeting through a fresh
    file:// store. Raises if any rank fails or the whole run takes longer than limit_s."""
    with tempfile.TemporaryDirectory(prefix="tutti-torch-") as d:
        init = "file://" + os.path.join(d, "init")
        ctx = mp.start_processes(_entry, args=(fn, size, init, args), nprocs=size, join=False,
                                 start_method="spawn")
        deadline = time.monotonic() + limit_s
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    if p.is_alive():
                        p.kill()
                raise SystemExit(f"FAILED: {fn.__name__} at {size} ranks still running after "
                                 f"{limit_s:.0f} s")


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def check_trained(scenario, size, start, on_tutti, on_gloo, bound=1e-6):
    """The parameters a model ended with trained on tutti (`on_tutti`) and on gloo (`on_gloo`)
    from `start`: training moved them, they are identical at 2 ranks and within `bound`
    relative at more (sums in another order round differently), and every rank holds the same
    (collective: broadcasts from rank 0 over the default group)."""
    import torch
    import torch.distributed as dist

    moved = any(not torch.equal(a, b) for a, b in zip(on_tutti, start))
    check(moved, f"{scenario}: training did not change the parameters")
    for i, (t, g) in enumerate(zip(on_tutti, on_gloo)):
        if size == 2:
            check(torch.equal(t, g), f"{scenario}: parameter {i} differs at 2 ranks: "
                  f"max |diff| {(t - g).abs().max().item()}")
        else:
            rel = ((t - g).abs().max() / g.abs().max().clamp_min(1e-30)).item()
            check(rel <= bound, f"{scenario}: parameter {i} differs by {rel} relative (> {bound})")
    for i, t in enumerate(on_tutti):
        first = t.clone()
        dist.broadcast(first, 0)
        check(torch.equal(first, t), f"{scenario}: ranks disagree on parameter {i}")


def world_sizes(sizes):
    """`sizes`, or TUTTI_TORCH_SIZES (comma-separated) where set."""
    if os.environ.get("TUTTI_TORCH_SIZES"):
        return [int(s) for s in os.environ["TUTTI_TORCH_SIZES"].split(",")]
    return sizes


def main(tests, sizes):
    """Runs each test at each world size in `sizes`; TUTTI_TORCH_SIZES overrides."""
    for size in world_sizes(sizes):
        for t in tests:
            start = time.monotonic()
            spawn(t, size)
            print(f"ok   {t.__name__} at {size} ranks ({time.monotonic() - start:.1f} s)",
                  flush=True)
