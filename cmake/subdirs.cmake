# Adds every immediate sub-folder of the current source folder that has a CMakeLists.txt, so each
# part (and its tests, benchmarks, fuzzers) owns its own CMake file and parts can be added
# without editing a shared list. For development builds, -DSTEERMOE_PARTS="common;policy" limits
# the folders added (in src/, tests/, bench/ and fuzz/) to those names.
macro(steermoe_add_all_subdirectories)
  file(GLOB _sm_children LIST_DIRECTORIES true RELATIVE ${CMAKE_CURRENT_SOURCE_DIR}
       ${CMAKE_CURRENT_SOURCE_DIR}/*)
  list(SORT _sm_children)
  foreach(_sm_child ${_sm_children})
    if(IS_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${_sm_child}
       AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${_sm_child}/CMakeLists.txt)
      if(STEERMOE_PARTS AND NOT _sm_child IN_LIST STEERMOE_PARTS)
        continue()
      endif()
      add_subdirectory(${_sm_child})
    endif()
  endforeach()
endmacro()
