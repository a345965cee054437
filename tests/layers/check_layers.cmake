# Layers point one way (DESIGN §9): a header under include/tutti includes only headers of its
# own layer or of lower ones. Run as
#   cmake -DROOT=<dir holding tutti/> -P check_layers.cmake
# It fails, listing every upward include, if there is one, or if a header matches no rule.
# With -DEXPECT="<header> -> <included>;..." it passes only if the upward includes found are
# exactly those (ctest layers.detects_violation runs it so over tests/layers/fixture).
#
# The layers, lowest first, and the rule that places each header (first match wins):
#
#   0 core          tutti/core/*
#   1 detail        tutti/detail/*, tutti/work.hpp, tutti/version.hpp
#   2 bootstrap     tutti/bootstrap/*, tutti/detail/store/*
#   3 transport     tutti/transport/*, tutti/detail/gloo/*, tutti/detail/nccl/*
#   4 algorithm     tutti/algorithm/*, tutti/detail/context.hpp, tutti/detail/policy_traits.hpp
#   5 communicator  tutti/communicator.hpp, tutti/run.hpp, tutti/mesh.hpp, tutti/hosts.hpp,
#                   tutti/detail/communicator*.hpp
#   6 adapters      tutti/adapters/*, tutti/detail/bucket_engine.hpp
#   7 umbrella      tutti/tutti.hpp
#
# Why the exceptions: detail/ holds private machinery, and most of it sits below the
# transports. A subfolder of detail/ holds the private parts of one component and sits at that
# component's layer (store: tcp_store's wire protocol, engine and server; gloo, nccl: the
# transports' parts). detail/context.hpp is what an algorithm sees of a transport (a class
# template over the transport, dispatching on transport concepts), and policy_traits.hpp the
# concepts naming which collectives a policy implements over that context: both are the
# algorithm layer's private parts. detail/communicator*.hpp are the communicator's, and
# detail/bucket_engine.hpp the bucketer's (over any communicator, with the bucketer's options).
# bootstrap sits below the transports: a transport's from_env meets its peers through a store,
# while no store needs a transport.

set(_tutti_layer_names core detail bootstrap transport algorithm communicator adapters umbrella)

# The layer index of header `path` (relative to ROOT, e.g. tutti/core/half.hpp) in `out`, or -1.
function(tutti_layer_of path out)
  set(_rules
      "^tutti/core/" 0
      "^tutti/detail/store/" 2
      "^tutti/detail/(gloo|nccl)/" 3
      "^tutti/detail/(context|policy_traits)\\.hpp$" 4
      "^tutti/detail/communicator[^/]*\\.hpp$" 5
      "^tutti/detail/bucket_engine\\.hpp$" 6
      "^tutti/detail/" 1
      "^tutti/(work|version)\\.hpp$" 1
      "^tutti/bootstrap/" 2
      "^tutti/transport/" 3
      "^tutti/algorithm/" 4
      "^tutti/(communicator|run|mesh|hosts)\\.hpp$" 5
      "^tutti/adapters/" 6
      "^tutti/tutti\\.hpp$" 7)
  list(LENGTH _rules _n)
  math(EXPR _last "${_n} - 1")
  foreach(_i RANGE 0 ${_last} 2)
    math(EXPR _j "${_i} + 1")
    list(GET _rules ${_i} _re)
    list(GET _rules ${_j} _layer)
    if(path MATCHES "${_re}")
      set(${out} ${_layer} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} -1 PARENT_SCOPE)
endfunction()

if(NOT DEFINED ROOT OR NOT IS_DIRECTORY "${ROOT}/tutti")
  message(FATAL_ERROR "check_layers: -DROOT=<dir> must name a directory holding tutti/")
endif()
get_filename_component(ROOT "${ROOT}" ABSOLUTE)

file(GLOB_RECURSE _headers RELATIVE "${ROOT}" "${ROOT}/tutti/*.hpp" "${ROOT}/tutti/*.cuh"
     "${ROOT}/tutti/*.h")
list(SORT _headers)
set(_found "")
set(_unplaced "")
foreach(_hdr IN LISTS _headers)
  tutti_layer_of("${_hdr}" _from)
  if(_from EQUAL -1)
    list(APPEND _unplaced "${_hdr}")
    continue()
  endif()
  file(STRINGS "${ROOT}/${_hdr}" _lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]tutti/")
  foreach(_line IN LISTS _lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"](tutti/[^>\"]+)[>\"].*$" "\\1" _inc
                         "${_line}")
    tutti_layer_of("${_inc}" _to)
    if(_to EQUAL -1)
      list(APPEND _unplaced "${_inc} (included by ${_hdr})")
    elseif(_to GREATER _from)
      list(GET _tutti_layer_names ${_from} _from_name)
      list(GET _tutti_layer_names ${_to} _to_name)
      list(APPEND _found "${_hdr} -> ${_inc}")
      message(STATUS "upward include: ${_hdr} (${_from_name}) includes ${_inc} (${_to_name})")
    endif()
  endforeach()
endforeach()

list(LENGTH _headers _count)
if(_count EQUAL 0)
  message(FATAL_ERROR "check_layers: no headers under ${ROOT}/tutti")
endif()
if(_unplaced)
  list(JOIN _unplaced "\n  " _text)
  message(FATAL_ERROR "check_layers: no layer rule places\n  ${_text}\n"
                      "Add a rule to tests/layers/check_layers.cmake.")
endif()
if(DEFINED EXPECT)
  list(SORT _found)
  set(_want ${EXPECT})
  list(SORT _want)
  if(NOT _found STREQUAL _want)
    message(FATAL_ERROR "check_layers: expected upward includes [${_want}], found [${_found}]")
  endif()
  message(STATUS "check_layers: ${_count} headers, the expected upward includes found")
elseif(_found)
  list(LENGTH _found _bad)
  message(FATAL_ERROR "check_layers: ${_bad} upward include(s) in ${_count} headers (above); "
                      "layers: core <- detail <- bootstrap <- transport <- algorithm <- "
                      "communicator <- adapters <- tutti.hpp")
else()
  message(STATUS "check_layers: ${_count} headers, every include points down or sideways")
endif()
