# Runs sluice-make-mlp with the bundled model's options and fails unless the file it writes equals
# models/mlp/1/model.safetensors byte for byte. Keep the options in step with models/mlp/README.md.
execute_process(COMMAND ${TOOL} --layers 784,512,512,10 --seed 1 --dtype F32 --out ${OUT}
                RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "sluice-make-mlp failed (${result})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT} ${EXPECTED}
                RESULT_VARIABLE different)
if(NOT different EQUAL 0)
  message(FATAL_ERROR "${OUT} differs from ${EXPECTED}: regenerate the bundled weights "
                      "(models/mlp/README.md) or fix the generator")
endif()
message(STATUS "regenerated weights equal ${EXPECTED}")
