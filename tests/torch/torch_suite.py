"""torch's own tests for distributed backends -- DistributedTest._DistTestBase in
torch.testing._internal.distributed.distributed_test, which torch's
test/distributed/test_distributed_spawn.py runs for gloo and nccl -- run on the backend BACKEND
names ("tutti", or "gloo" for the reference), WORLD_SIZE ranks each its own process.

    BACKEND=tutti WORLD_SIZE=2 python tests/torch/torch_suite.py [-k PATTERN] [-v]

tutti is a plugin backend to that suite (DistTestCases.backend_feature["plugin"]) with DDP
("ddp"): torch gates tests on those sets, and skips the GPU ones on a machine without GPUs.
Many CPU tests torch enables for gloo by name only (sparse all-reduce, futures, timeouts,
batch_isend_irecv on the CPU, DDP on CPU modules); TUTTI_SUITE_AS=gloo runs gloo's suite with
tutti underneath: tests are chosen and their bodies branch as for gloo (BACKEND=gloo), but
every rank's default process group is tutti, so every call a test makes without naming a
backend runs on tutti. (A test that compares dist.get_backend() with "gloo" fails then.)
"""

import datetime
import os
import sys
import tempfile

os.environ.setdefault("BACKEND", "tutti")
os.environ.setdefault("WORLD_SIZE", "2")
if "TEMP_DIR" not in os.environ:  # the suite's barrier and lock files
    _tmp = tempfile.TemporaryDirectory(prefix="tutti-torch-suite-")
    os.environ["TEMP_DIR"] = _tmp.name

import torch  # noqa: E402,F401  (before torch.testing)
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if os.environ["BACKEND"] == "tutti":
    import tutti_torch  # noqa: F401,E402  (registers "tutti")

    DistTestCases.backend_feature["plugin"].add("tutti")
    DistTestCases.backend_feature["ddp"].add("tutti")

import torch.distributed as dist  # noqa: E402
from torch.testing._internal.common_utils import run_tests  # noqa: E402

RUN_ON = os.environ["BACKEND"]  # the backend every rank's default group runs on
os.environ["BACKEND"] = os.environ.get("TUTTI_SUITE_AS", RUN_ON)  # the suite's view
from torch.testing._internal.distributed import distributed_test  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()

    @classmethod
    def _run(cls, rank, test_name, file_name, pipe, **kwargs):
        # What TestDistBackend._run does, with the default group on RUN_ON.
        self = cls(test_name)
        self.rank = rank
        self.file_name = file_name
        seconds = distributed_test.CUSTOM_PG_TIMEOUT.get(test_name,
                                                         distributed_test.default_pg_timeout)
        dist.init_process_group(init_method=self.init_method, backend=RUN_ON,
                                world_size=int(self.world_size), rank=rank,
                                timeout=datetime.timedelta(seconds=seconds))
        self._barrier()
        self.run_test(test_name, pipe)
        self._barrier()
        dist.destroy_process_group()
        sys.exit(0)


if __name__ == "__main__":
    run_tests()
