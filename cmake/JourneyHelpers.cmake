# journey_add_test(NAME SOURCES... [LIBS ...] [LABELS ...])
# One doctest executable per module; registered with ctest and run from the repository root
# so that tests can name data/ and tests/golden/ by relative path.
function(journey_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES} ${PROJECT_SOURCE_DIR}/tests/doctest_main.cpp)
  target_link_libraries(${name} PRIVATE ${ARG_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${name} PRIVATE
    JOURNEY_SOURCE_DIR="${PROJECT_SOURCE_DIR}" JOURNEY_BINARY_DIR="${PROJECT_BINARY_DIR}")
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  if(ARG_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
endfunction()

# journey_add_chapter(ch04_attention [ARGS ...])
# A chapter is chapters/<name>/main.cpp: a thin driver over the journey library. It builds as its
# own target and runs as a ctest (label "chapter") on the shipped default model.
function(journey_add_chapter name)
  cmake_parse_arguments(ARG "" "" "ARGS;LIBS" ${ARGN})
  add_executable(${name} ${CMAKE_CURRENT_SOURCE_DIR}/${name}/main.cpp)
  target_link_libraries(${name} PRIVATE journey_lib ${ARG_LIBS})
  target_compile_definitions(${name} PRIVATE JOURNEY_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  if(JOURNEY_TESTS)
    add_test(NAME chapter.${name} COMMAND ${name} ${ARG_ARGS} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    set_tests_properties(chapter.${name} PROPERTIES LABELS chapter)
  endif()
endfunction()
