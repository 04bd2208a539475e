# Bookkeeping of kernel families: which were built, which skipped and why, printed at configure time.

function(dlbench_family_built family detail)
  set_property(GLOBAL APPEND PROPERTY DLBENCH_FAMILIES_BUILT "${family} (${detail})")
endfunction()

function(dlbench_family_skipped family reason)
  set_property(GLOBAL APPEND PROPERTY DLBENCH_FAMILIES_SKIPPED "${family}: ${reason}")
endfunction()

function(dlbench_print_family_summary)
  get_property(built GLOBAL PROPERTY DLBENCH_FAMILIES_BUILT)
  get_property(skipped GLOBAL PROPERTY DLBENCH_FAMILIES_SKIPPED)
  message(STATUS "dlbench native kernel families:")
  foreach(item IN LISTS built)
    message(STATUS "  built   ${item}")
  endforeach()
  foreach(item IN LISTS skipped)
    message(STATUS "  SKIPPED ${item}")
  endforeach()
endfunction()

# A benchmark executable linked to the protocol library, with one ctest per verify mode.
function(dlbench_add_benchmark target)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES;DEFINITIONS" ${ARGN})
  add_executable(${target} ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE dlbench_common ${ARG_LIBRARIES})
  if(ARG_DEFINITIONS)
    target_compile_definitions(${target} PRIVATE ${ARG_DEFINITIONS})
  endif()
endfunction()

function(dlbench_add_verify_test target)
  add_test(NAME ${target}_verify COMMAND ${target} --verify)
  set_tests_properties(${target}_verify PROPERTIES LABELS "verify" TIMEOUT 120)
endfunction()
