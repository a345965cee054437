"""Conan 2 recipe for tutti, a header-only C++20 collective communication library.

    conan create . -s compiler.cppstd=20                      # core: tutti::tutti
    conan create . -s compiler.cppstd=20 -o "&:with_gloo=True" -o "&:with_nccl=True"

ConanCenter has no Gloo and no NCCL recipe, so with_gloo and with_nccl use the system's:
Gloo and hiredis from the default compiler and linker paths (Debian: libgloo-dev); NCCL and the
CUDA runtime from NCCL_ROOT and CUDA_HOME (default /usr/local/cuda), read when a consumer uses
the package.
"""

import os
import re

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.build import check_min_cppstd
from conan.tools.files import copy, load
from conan.tools.layout import basic_layout

required_conan_version = ">=2.0"


class TuttiConan(ConanFile):
    name = "tutti"
    description = "Header-only C++20 collective communication for distributed training"
    license = "Apache-2.0"
    topics = ("collectives", "all-reduce", "distributed-training", "nccl", "gloo", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {"with_gloo": [True, False], "with_nccl": [True, False]}
    default_options = {"with_gloo": False, "with_nccl": False}
    exports_sources = "include/*", "LICENSE"
    no_copy_source = True

    def set_version(self):
        header = load(self, os.path.join(self.recipe_folder, "include", "tutti", "version.hpp"))
        parts = (re.search(rf"#define TUTTI_VERSION_{part} (\d+)", header).group(1)
                 for part in ("MAJOR", "MINOR", "PATCH"))
        self.version = ".".join(parts)

    def layout(self):
        basic_layout(self, src_folder=".")

    def package_id(self):
        self.info.clear()

    def validate(self):
        check_min_cppstd(self, 20)
        if self.settings.os != "Linux":
            raise ConanInvalidConfiguration("tutti needs Linux (POSIX shared memory, prctl)")

    def package(self):
        copy(self, "LICENSE", src=self.source_folder, dst=os.path.join(self.package_folder, "licenses"))
        for pattern in ("*.hpp", "*.h", "*.cuh"):
            copy(self, pattern, src=os.path.join(self.source_folder, "include"),
                 dst=os.path.join(self.package_folder, "include"))

    def package_info(self):
        # Consumers write the same names as with tutti's own CMake package and .pc files.
        self.cpp_info.set_property("cmake_file_name", "tutti")
        self.cpp_info.set_property("cmake_target_name", "tutti::all")
        self.cpp_info.set_property("pkg_config_name", "tutti-all")

        core = self.cpp_info.components["tutti"]
        core.set_property("cmake_target_name", "tutti::tutti")
        core.set_property("pkg_config_name", "tutti")
        core.bindirs = []
        core.libdirs = []
        core.system_libs = ["pthread"]

        if self.options.with_gloo or self.options.with_nccl:
            self.output.warning("ConanCenter has no Gloo or NCCL recipe: tutti's with_gloo and "
                                "with_nccl use the system's (see tutti's conanfile.py)")

        if self.options.with_gloo:
            gloo = self.cpp_info.components["gloo"]
            gloo.set_property("cmake_target_name", "tutti::gloo")
            gloo.set_property("pkg_config_name", "tutti-gloo")
            gloo.requires = ["tutti"]
            gloo.defines = ["TUTTI_HAVE_GLOO=1", "HIREDIS_NESTED_INCLUDE"]
            gloo.system_libs = ["gloo", "hiredis"]
            gloo.includedirs = []
            gloo.bindirs = []
            gloo.libdirs = []

        if self.options.with_nccl:
            cuda = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
            roots = list(dict.fromkeys([os.environ.get("NCCL_ROOT") or cuda, cuda]))
            nccl = self.cpp_info.components["nccl"]
            nccl.set_property("cmake_target_name", "tutti::nccl")
            nccl.set_property("pkg_config_name", "tutti-nccl")
            nccl.requires = ["tutti"]
            nccl.defines = ["TUTTI_HAVE_NCCL=1"]
            nccl.includedirs = [os.path.join(root, "include") for root in roots]
            nccl.libdirs = [next((os.path.join(root, lib) for lib in ("lib64", "lib")
                                  if os.path.isdir(os.path.join(root, lib))),
                                 os.path.join(root, "lib"))
                            for root in roots]
            nccl.system_libs = ["nccl", "cudart"]  # Conan drops `libs` of a header-library
            nccl.bindirs = []
