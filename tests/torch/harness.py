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


def _entry(rank, fn, size, init, args):
    try:
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


def main(tests, sizes):
    """Runs each test at each world size in `sizes`; TUTTI_TORCH_SIZES overrides."""
    if os.environ.get("TUTTI_TORCH_SIZES"):
        sizes = [int(s) for s in os.environ["TUTTI_TORCH_SIZES"].split(",")]
    for size in sizes:
        for t in tests:
            start = time.monotonic()
            spawn(t, size)
            print(f"ok   {t.__name__} at {size} ranks ({time.monotonic() - start:.1f} s)",
                  flush=True)
