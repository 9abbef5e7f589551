# journey_add_test(NAME SOURCES... [LIBS ...] [LABELS ...] [OWN_MAIN])
# One doctest executable per module; registered with ctest and run from the repository root
# so that tests can name data/ and tests/golden/ by relative path. OWN_MAIN: the sources define
# main() instead of tests/doctest_main.cpp, so that it can exit 77 (ctest "Skipped") and say why
# when what the suite tests is not there.
function(journey_add_test name)
  cmake_parse_arguments(ARG "OWN_MAIN" "" "SOURCES;LIBS;LABELS" ${ARGN})
  if(ARG_OWN_MAIN)
    add_executable(${name} ${ARG_SOURCES})
  else()
    add_executable(${name} ${ARG_SOURCES} ${PROJECT_SOURCE_DIR}/tests/doctest_main.cpp)
  endif()
  target_link_libraries(${name} PRIVATE ${ARG_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${name} PRIVATE
    JOURNEY_SOURCE_DIR="${PROJECT_SOURCE_DIR}" JOURNEY_BINARY_DIR="${PROJECT_BINARY_DIR}")
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  if(ARG_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
  if(ARG_OWN_MAIN)
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77)
  endif()
endfunction()

# journey_add_chapter(ch04_attention [ARGS ...] [LIBS ...] [NEEDS_MODELS])
# A chapter is chapters/<name>/main.cpp: a thin driver over the journey library, and
# chapters/<name>/README.md (+ README.zh-CN.md): the lesson. It builds as its own target and runs
# as the ctest chapter.<name> (label "chapter") on the shipped default model, from the repository
# root. The output a README shows between <!-- journey:output <name> ... --> and
# <!-- journey:end --> must be what the program prints: the ctest runs tools/book/update_outputs.py
# --check, which runs the program and compares (docs/book.md); tools/book/update_outputs.py --build
# BUILD --chapter <name> rewrites the blocks after an intended change. ARGS: the arguments of a
# plain run when no README marks a block (a marked block names its own). Exit status 77 = skipped.
# NEEDS_MODELS: some blocks run on what scripts/install-deps.sh fetches into the git-ignored models/
# (marked needs="models/..."); they are checked by a second ctest, chapter.<name>.models (labels
# chapter, smollm2, ci-required), which skips with exit 77 and says so when the model is absent.
function(journey_add_chapter name)
  cmake_parse_arguments(ARG "NEEDS_MODELS" "" "ARGS;LIBS" ${ARGN})
  add_executable(${name} ${CMAKE_CURRENT_SOURCE_DIR}/${name}/main.cpp)
  target_link_libraries(${name} PRIVATE journey_lib ${ARG_LIBS})
  target_compile_definitions(${name} PRIVATE JOURNEY_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  if(JOURNEY_TESTS)
    find_program(JOURNEY_PYTHON3 NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
    find_program(JOURNEY_PYTHON3 NAMES python3)
    if(NOT JOURNEY_PYTHON3)
      message(FATAL_ERROR "python3 is needed to check the chapters' README output (apt install python3)")
    endif()
    add_test(NAME chapter.${name}
      COMMAND ${JOURNEY_PYTHON3} ${PROJECT_SOURCE_DIR}/tools/book/update_outputs.py --check --chapter ${name}
              --binary $<TARGET_FILE:${name}> -- ${ARG_ARGS}
      WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    set_tests_properties(chapter.${name} PROPERTIES LABELS chapter SKIP_RETURN_CODE 77)
    if(ARG_NEEDS_MODELS)
      add_test(NAME chapter.${name}.models
        COMMAND ${JOURNEY_PYTHON3} ${PROJECT_SOURCE_DIR}/tools/book/update_outputs.py --check --needs --chapter ${name}
                --binary $<TARGET_FILE:${name}>
        WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
      set_tests_properties(chapter.${name}.models PROPERTIES LABELS "chapter;smollm2;ci-required" SKIP_RETURN_CODE 77)
    endif()
  endif()
endfunction()
