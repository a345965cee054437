#pragma once
/// \file
/// The umbrella header: core types and ops, the in-process and shared-memory transports, every
/// algorithm policy, the communicator and tutti::inproc::run, the bootstrap (launcher
/// environments, stores, init URLs, tutti::spawn), and the training adapters (bucketer,
/// distributed_sampler).

#include "tutti/adapters/bucketer.hpp"
#include "tutti/adapters/parameters.hpp"
#include "tutti/adapters/sampler.hpp"
#include "tutti/algorithm/automatic.hpp"
#include "tutti/algorithm/bruck.hpp"
#include "tutti/algorithm/direct.hpp"
#include "tutti/algorithm/native.hpp"
#include "tutti/algorithm/recursive_doubling.hpp"
#include "tutti/algorithm/recursive_halving.hpp"
#include "tutti/algorithm/ring.hpp"
#include "tutti/algorithm/tree.hpp"
#include "tutti/bootstrap/env.hpp"
#include "tutti/bootstrap/file_store.hpp"
#include "tutti/bootstrap/spawn.hpp"
#include "tutti/bootstrap/store.hpp"
#include "tutti/bootstrap/tcp_store.hpp"
#include "tutti/bootstrap/url.hpp"
#include "tutti/communicator.hpp"
#include "tutti/core/bfloat16.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/half.hpp"
#include "tutti/core/ops.hpp"
#include "tutti/core/options.hpp"
#include "tutti/core/types.hpp"
#include "tutti/hosts.hpp"
#include "tutti/mesh.hpp"
#include "tutti/run.hpp"
#include "tutti/transport/concepts.hpp"
#include "tutti/transport/inproc.hpp"
#include "tutti/transport/shm.hpp"
#include "tutti/version.hpp"
#include "tutti/work.hpp"
