# The whole-model comparison from the command line, as a user runs it:
#   journey trace --device reference  and  journey trace --device cpu  on the same prompt, then
#   journey-trace diff cpu reference  — which must find every stage of every step within tolerance.
# -DJOURNEY=... -DTRACE_TOOL=... -DMODEL=... -DTOKENIZER=... -DOUT=...
file(REMOVE_RECURSE ${OUT})
foreach(device reference cpu)
  execute_process(
    COMMAND ${JOURNEY} trace --model ${MODEL} --tokenizer ${TOKENIZER} --device ${device} --threads 2
            --temperature 0 --max-tokens 4 --out ${OUT}/${device} "Once upon a time"
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "journey trace --device ${device} failed (${status}):\n${out}\n${err}")
  endif()
endforeach()
execute_process(COMMAND ${TRACE_TOOL} diff ${OUT}/cpu ${OUT}/reference
                OUTPUT_VARIABLE report ERROR_VARIABLE err RESULT_VARIABLE status)
message("${report}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "journey-trace diff cpu reference: the backends diverge (${status}):\n${err}")
endif()
