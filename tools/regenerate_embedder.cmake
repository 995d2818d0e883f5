# Runs sluice-make-encoder with the bundled embedder's options and fails unless every file it
# writes equals the one in models/embedder/1 byte for byte. Keep the options in step with
# models/embedder/README.md.
file(REMOVE_RECURSE ${OUT})
execute_process(COMMAND ${TOOL} --out ${OUT} RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "sluice-make-encoder failed (${result})")
endif()
foreach(name config.json model.safetensors modules.json sentence_bert_config.json
             1_Pooling/config.json)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT}/${name} ${EXPECTED}/${name}
                  RESULT_VARIABLE different)
  if(NOT different EQUAL 0)
    message(FATAL_ERROR "${OUT}/${name} differs from ${EXPECTED}/${name}: regenerate the bundled "
                        "embedder (models/embedder/README.md) or fix the generator")
  endif()
endforeach()
message(STATUS "regenerated checkpoint equals ${EXPECTED}")
