"""Builds tutti_torch against the torch already installed:

    pip install --no-build-isolation ./python

tutti's headers come from ../include (or TUTTI_INCLUDE); tutti::gloo needs Debian's
libgloo-dev and libhiredis-dev (apt).
"""

import os
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = Path(__file__).resolve().parent
include = Path(os.environ.get("TUTTI_INCLUDE", here.parent / "include")).resolve()
if not (include / "tutti" / "communicator.hpp").is_file():
    raise SystemExit(f"tutti_torch: tutti's headers are not in {include}; set TUTTI_INCLUDE")

setup(
    name="tutti_torch",
    version="0.1.0",
    description="tutti as a torch.distributed backend",
    license="Apache-2.0",
    packages=["tutti_torch"],
    ext_modules=[
        CppExtension(
            name="tutti_torch._C",
            sources=["csrc/backend.cpp", "csrc/p2p.cpp", "csrc/sparse.cpp", "csrc/module.cpp"],
            include_dirs=[str(include)],
            define_macros=[("TUTTI_HAVE_GLOO", "1"), ("HIREDIS_NESTED_INCLUDE", None)],
            # libgloo before libtorch: this module's Gloo symbols bind to Debian's libgloo,
            # not to the (different) Gloo inside libtorch_cpu.
            libraries=["gloo", "hiredis"],
            extra_compile_args=["-std=c++20", "-O2", "-Wno-unused-parameter"],
            extra_link_args=["-Wl,-Bsymbolic", "-Wl,--no-as-needed"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    # `import torch` loads tutti_torch (torch's autoload of out-of-tree backends), so code
    # written for another backend needs only the backend string changed.
    entry_points={"torch.backends": ["tutti = tutti_torch._autoload:load"]},
)
