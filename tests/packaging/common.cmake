# Helpers for the packaging tests (tests/packaging/*.cmake, run as cmake -P by ctest).
# Every script gets -DSOURCE_DIR (tutti's sources), -DWORK_DIR (its own scratch directory),
# -DCXX (the compiler tutti's build uses) and -DGENERATOR; most also get -DPREFIX, the tree
# the packaging.install fixture installed.

foreach(_var IN ITEMS SOURCE_DIR WORK_DIR CXX GENERATOR ${TUTTI_PACKAGING_NEEDS})
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "${CMAKE_SCRIPT_MODE_FILE} needs -D${_var}=...")
  endif()
endforeach()
set(PACKAGING_DIR "${CMAKE_CURRENT_LIST_DIR}")

# Runs a command; stops the test with its output when it fails.
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "failed (${_rc}): ${ARGN}\n${_out}")
  endif()
endfunction()

# consumer(<name> <project dir> [configure args...]): configures, builds (-j2) and runs the
# program <name> of a consumer project, in WORK_DIR/<name>. Unoptimized (a build type with no
# flags): what is checked is that tutti is found, compiles and links as the README says, and
# under load -O3 took twice as long (find_package 81 s against 40; Release's own tests compile
# tutti at -O3).
function(consumer name project_dir)
  set(_build "${WORK_DIR}/${name}")
  file(REMOVE_RECURSE "${_build}")
  step("${CMAKE_COMMAND}" -S "${project_dir}" -B "${_build}" -G "${GENERATOR}"
       -DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_COMPILER=${CXX}" ${ARGN})
  step("${CMAKE_COMMAND}" --build "${_build}" -j2)
  execute_process(COMMAND "${_build}/${name}" RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${name} (built from ${project_dir}) failed: ${_rc}")
  endif()
endfunction()

# Ends the test as skipped: ctest matches this line (SKIP_REGULAR_EXPRESSION). Call it last,
# after every check that could fail.
function(skip)
  string(JOIN "" _why ${ARGV})
  message("tutti-packaging: SKIPPED: ${_why}")
endfunction()

file(MAKE_DIRECTORY "${WORK_DIR}")
