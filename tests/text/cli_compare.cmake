# Runs `journey template` and compares its stdout byte for byte with an expected file.
# -DJOURNEY=... -DMODEL=... -DMESSAGES=... -DEXPECTED=...
execute_process(
  COMMAND ${JOURNEY} template --model ${MODEL} --messages ${MESSAGES} --add-generation-prompt
  OUTPUT_VARIABLE actual ERROR_VARIABLE errors RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "journey template failed (${status}): ${errors}")
endif()
file(READ ${EXPECTED} expected)
if(NOT actual STREQUAL expected)
  message(FATAL_ERROR "journey template output differs from ${EXPECTED}\n--- expected ---\n${expected}\n--- actual ---\n${actual}")
endif()
