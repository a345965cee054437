"""Faults through torch.distributed on "tutti": a rank killed mid-training makes the others
raise (naming it) instead of hanging until the process group's timeout; mismatched calls raise
on every rank, naming both sides; the group's timeout and Work.wait(timeout) bound waits.

    python tests/torch/test_faults.py     # world sizes 2-3 (TUTTI_TORCH_SIZES=4)
"""

import datetime
import os
import signal
import sys
import time
import traceback
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

import harness
import tutti_torch  # noqa: F401  (registers "tutti")

warnings.filterwarnings("ignore")

# The process group's timeout: far longer than the test may take, so only tutti's own
# detection of the dead rank can end the survivors' wait in time.
PG_TIMEOUT_S = 900
VICTIM_STEP = 3


def killed_mid_training(rank, size, init, q):
    harness.simulate_host(rank, size)
    dist.init_process_group("tutti", init_method=init, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 8)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    victim = size - 1
    try:
        for step in range(10_000):
            if rank == victim and step == VICTIM_STEP:
                os.kill(os.getpid(), signal.SIGKILL)
            opt.zero_grad()
            model(torch.randn(32, 64)).sum().backward()
            opt.step()
        q.put((rank, "finished without an error"))
    except Exception as e:  # noqa: BLE001  (reported to the parent)
        q.put((rank, f"raised {type(e).__name__}: {e}", time.monotonic()))
    os._exit(0)


def killed_while_received_from_any(rank, size, init, q):
    """The last rank sends every other rank one message and dies; their next receive from any
    rank raises, naming it."""
    harness.simulate_host(rank, size)
    dist.init_process_group("tutti", init_method=init, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
    victim = size - 1
    try:
        if rank == victim:
            for r in range(size - 1):
                dist.send(torch.ones(5), r, tag=1)
            os.kill(os.getpid(), signal.SIGKILL)
        harness.check(dist.recv(torch.zeros(5), tag=1) == victim, "the first message")
        dist.recv(torch.zeros(5), tag=1)
        q.put((rank, "finished without an error"))
    except Exception as e:  # noqa: BLE001  (reported to the parent)
        q.put((rank, f"raised {type(e).__name__}: {e}", time.monotonic()))
    os._exit(0)


def test_killed_rank(size, target=killed_mid_training):
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        init = "file://" + os.path.join(d, "init")
        procs = [ctx.Process(target=target, args=(r, size, init, q))
                 for r in range(size)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + harness.HANG_LIMIT_S
        victim = size - 1
        procs[victim].join(timeout=harness.HANG_LIMIT_S)
        died = time.monotonic()
        for p in procs:
            p.join(timeout=max(1.0, deadline - time.monotonic()))
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
        harness.check(not hung, f"ranks {hung} still waiting {harness.HANG_LIMIT_S:.0f} s "
                      "after a rank died")
        harness.check(procs[victim].exitcode == -signal.SIGKILL, "the victim did not die")
        reports = {}
        while not q.empty():
            item = q.get()
            reports[item[0]] = item
        for r in range(size - 1):
            harness.check(r in reports, f"rank {r} reported nothing")
            msg = reports[r][1]
            harness.check(msg.startswith("raised DistBackendError") and
                          f"rank {victim}" in msg,
                          f"rank {r}: expected a DistBackendError naming rank {victim}: {msg}")
            print(f"     rank {r} raised {reports[r][2] - died:+.2f} s after rank {victim} "
                  f"died: {msg.splitlines()[0][:200]}", flush=True)


def mismatched(rank, size, init):
    dist.init_process_group("tutti", init_method=init, rank=rank, world_size=size)
    # rank 0 reduces 4 floats, the others 5: every rank raises, naming both sides
    t = torch.ones(4 if rank == 0 else 5)
    try:
        dist.all_reduce(t)
    except dist.DistBackendError as e:
        msg = str(e)
        harness.check("mismatch" in msg, f"rank {rank}: not a mismatch error: {msg}")
        print(f"     rank {rank}: {msg.splitlines()[0][:240]}", flush=True)
    else:
        raise AssertionError(f"rank {rank}: a mismatched all_reduce returned")
    # a dtype that differs: a new group (the old one is broken by design after an error)
    g = dist.new_group(backend="tutti")
    u = torch.ones(4, dtype=torch.float32 if rank == 0 else torch.float64)
    try:
        dist.broadcast(u, 0, group=g)
    except dist.DistBackendError as e:
        harness.check("mismatch" in str(e), f"rank {rank}: not a mismatch error: {e}")
    else:
        raise AssertionError(f"rank {rank}: a broadcast with mismatched dtypes returned")
    os._exit(0)  # the broken groups' destructors have nothing left to say


def timeouts(rank, size, init):
    """The process group's timeout bounds a call whose peer never comes; Work.wait(timeout)
    gives up on its own without breaking the call, which completes once the peer arrives."""
    dist.init_process_group("tutti", init_method=init, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=3))
    store = dist.distributed_c10d._get_default_store()
    # Each scenario makes its own group (if any) first: dist.new_group is collective, so every
    # rank runs the scenarios in this order.
    work_wait_timeout(rank, size, store)
    monitored_barriers(rank, size, store)
    monitored_barrier_zero_timeout(rank, size)
    recv_from_any_timeout(rank, size, store)
    default_group_timeout(rank, size, store)
    os._exit(0)


def work_wait_timeout(rank, size, store):
    """Work.wait(timeout): rank 0 waits 100 ms for a call the others start only once it is told
    (through the store) that its wait gave up."""
    late = dist.new_group(backend="tutti", timeout=datetime.timedelta(seconds=600))
    t = torch.full((4,), float(rank + 1))
    if rank == 0:
        w = dist.all_reduce(t, async_op=True, group=late)
        try:
            w.wait(timeout=datetime.timedelta(milliseconds=100))
        except RuntimeError as e:
            harness.check("did not finish within 100 ms" in str(e), f"Work.wait: {e}")
        else:
            raise AssertionError("Work.wait(100 ms) returned before the other ranks called")
        harness.check(not w.is_completed(), "the call completed without the other ranks")
        store.set("gave_up", "1")
        w.wait()
    else:
        store.wait(["gave_up"])
        dist.all_reduce(t, group=late)
    harness.check(t.tolist() == [size * (size + 1) / 2] * 4, f"late all_reduce: {t.tolist()}")


def monitored_barriers(rank, size, store):
    """monitored_barrier: every rank comes; then the last one does not (rank 0 names it, the
    others raise with rank 0's verdict); then, with wait_all_ranks, every rank but rank 0
    stays away and rank 0 names them all."""
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=600))
    if rank != size - 1:
        try:
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=1))
        except dist.DistBackendError as e:
            harness.check(f"Rank {size - 1} failed to pass monitoredBarrier in 1000 ms" in str(e),
                          f"rank {rank}: monitored_barrier: {e}")
            if rank == 1:
                print(f"     rank 1: {str(e).splitlines()[0][:200]}", flush=True)
        else:
            raise AssertionError(f"rank {rank}: monitored_barrier without rank {size - 1} returned")
        store.set(f"monitored{rank}", "1")
    else:  # late, after the verdict: raises at once with it
        store.wait([f"monitored{r}" for r in range(size - 1)], datetime.timedelta(seconds=600))
        try:
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=600))
        except dist.DistBackendError as e:
            harness.check(f"Rank {rank} successfully reached monitoredBarrier, but received "
                          "errors while waiting for send/recv from rank 0" in str(e) and
                          f"Rank {size - 1} failed to pass monitoredBarrier" in str(e),
                          f"late rank: monitored_barrier: {e}")
        else:
            raise AssertionError("a late rank passed a monitored_barrier that had failed")
    if rank == 0:
        try:
            dist.monitored_barrier(timeout=datetime.timedelta(milliseconds=300),
                                   wait_all_ranks=True)
        except dist.DistBackendError as e:
            absent = ", ".join(str(r) for r in range(1, size))
            harness.check(("Ranks " + absent if size > 2 else "Rank 1") in str(e),
                          f"monitored_barrier(wait_all_ranks): {e}")
            print(f"     rank 0: {str(e).splitlines()[0][:200]}", flush=True)
        else:
            raise AssertionError("monitored_barrier(wait_all_ranks) without the others returned")
        store.set("monitored_all", "1")
    else:
        store.wait(["monitored_all"], datetime.timedelta(seconds=600))


def monitored_barrier_zero_timeout(rank, size):
    """A timeout of zero is a timeout (gloo's words); on a group of its own, since only rank 0
    takes part."""
    alone = dist.new_group(backend="tutti")
    if rank == 0 and size > 1:
        try:
            dist.monitored_barrier(alone, timeout=datetime.timedelta(0))
        except dist.DistBackendError as e:
            harness.check("Rank 0 timed out in monitoredBarrier after 0 ms.\nNo ranks "
                          "successfully processed in monitoredBarrier." in str(e),
                          f"monitored_barrier(timeout=0): {e}")
        else:
            raise AssertionError("monitored_barrier(timeout=0) returned")


def recv_from_any_timeout(rank, size, store):
    """A receive from any rank that no rank sends to: its group's timeout (1 s; the others wait
    outside the group meanwhile)."""
    short = dist.new_group(backend="tutti", timeout=datetime.timedelta(seconds=1))
    if rank == 0 and size > 2:
        try:
            dist.recv(torch.zeros(2), tag=11, group=short)
        except dist.DistBackendError as e:
            harness.check("timed out" in str(e), f"recv from any rank: {e}")
            print(f"     rank 0: {str(e).splitlines()[0][:200]}", flush=True)
        else:
            raise AssertionError("a receive from any rank that nobody sends to returned")
        store.set("any_done", "1")
    elif size > 2:
        store.wait(["any_done"], datetime.timedelta(seconds=600))


def default_group_timeout(rank, size, store):
    """The group's 3 s timeout: the last rank never calls; the others raise a timeout."""
    if rank != size - 1:
        try:
            dist.all_reduce(torch.ones(3))
        except dist.DistBackendError as e:
            harness.check("timeout" in str(e) or "timed out" in str(e), f"rank {rank}: {e}")
            print(f"     rank {rank}: {str(e).splitlines()[0][:200]}", flush=True)
        else:
            raise AssertionError(f"rank {rank}: all_reduce without rank {size - 1} returned")
        store.set(f"done{rank}", "1")
    else:
        store.wait([f"done{r}" for r in range(size - 1)], datetime.timedelta(seconds=600))


if __name__ == "__main__":
    try:
        for size in harness.world_sizes([2, 3]):
            start = time.monotonic()
            test_killed_rank(size)
            print(f"ok   killed rank at {size} ranks ({time.monotonic() - start:.1f} s)",
                  flush=True)
            if size > 2:
                start = time.monotonic()
                test_killed_rank(size, killed_while_received_from_any)
                print(f"ok   killed rank while received from any at {size} ranks "
                      f"({time.monotonic() - start:.1f} s)", flush=True)
            start = time.monotonic()
            harness.spawn(mismatched, size)
            print(f"ok   mismatched calls at {size} ranks ({time.monotonic() - start:.1f} s)",
                  flush=True)
            start = time.monotonic()
            harness.spawn(timeouts, size)
            print(f"ok   timeouts at {size} ranks ({time.monotonic() - start:.1f} s)", flush=True)
    except Exception:
        traceback.print_exc()
        sys.exit(1)
