#pragma once
/// \file
/// The umbrella header: core types and ops, the in-process transport, every algorithm policy
/// and the communicator.

#include "tutti/algorithm/automatic.hpp"
#include "tutti/algorithm/bruck.hpp"
#include "tutti/algorithm/direct.hpp"
#include "tutti/algorithm/recursive_doubling.hpp"
#include "tutti/algorithm/recursive_halving.hpp"
#include "tutti/algorithm/ring.hpp"
#include "tutti/algorithm/tree.hpp"
#include "tutti/communicator.hpp"
#include "tutti/core/bfloat16.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/half.hpp"
#include "tutti/core/ops.hpp"
#include "tutti/core/options.hpp"
#include "tutti/core/types.hpp"
#include "tutti/transport/concepts.hpp"
#include "tutti/transport/inproc.hpp"
#include "tutti/version.hpp"
#include "tutti/work.hpp"
