# ctest example.ddp_mlp.equivalence: data parallelism must not change the training.
#   cmake -DDDP_MLP=<examples/ddp_mlp> -DWORK_DIR=<dir> -P ddp_equivalence.cmake
# After the same steps, N ranks with batch b end with the weights of 1 rank with batch N*b,
# and k micro-batches accumulated under no_sync() with those of one step over k*b (within
# 1e-5 relative: ddp_mlp --compare). A batch of another size must give other weights, so the
# comparison is shown to tell them apart.
cmake_minimum_required(VERSION 3.21)
if(NOT DDP_MLP OR NOT WORK_DIR)
  message(FATAL_ERROR "usage: cmake -DDDP_MLP=<ddp_mlp> -DWORK_DIR=<dir> -P ddp_equivalence.cmake")
endif()
file(MAKE_DIRECTORY "${WORK_DIR}")

function(train name)
  execute_process(COMMAND "${DDP_MLP}" ${ARGN} --steps 60 --save "${WORK_DIR}/${name}.txt"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "ddp_mlp ${ARGN}: exit ${rc}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "ddp_mlp ${ARGN} failed")
  endif()
endfunction()

function(compare a b want)
  execute_process(COMMAND "${DDP_MLP}" --compare "${WORK_DIR}/${a}.txt" "${WORK_DIR}/${b}.txt"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${out}${err}")
  if(NOT rc EQUAL want)
    message(FATAL_ERROR "compare ${a} ${b}: exit ${rc}, expected ${want}")
  endif()
endfunction()

train(np1_b16 --np 1 --batch 16)
train(np2_b8 --np 2 --batch 8)
train(np4_b4 --np 4 --batch 4)
train(np1_b4_acc4 --np 1 --batch 4 --accum 4)
train(np2_b2_acc4 --np 2 --batch 2 --accum 4)
train(np4_b2_acc2 --np 4 --batch 2 --accum 2)
train(np1_b8 --np 1 --batch 8)
compare(np1_b16 np2_b8 0)
compare(np1_b16 np4_b4 0)
compare(np1_b16 np1_b4_acc4 0)
compare(np1_b16 np2_b2_acc4 0)
compare(np1_b16 np4_b2_acc2 0)
compare(np1_b16 np1_b8 1)
