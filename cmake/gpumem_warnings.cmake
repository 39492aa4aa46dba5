# Warnings for gpumem's own targets only: linked as $<BUILD_INTERFACE:gpumem_warnings>, so the exported
# targets never name it and consumers never inherit it.
add_library(gpumem_warnings INTERFACE)
target_compile_options(gpumem_warnings INTERFACE
  $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
    -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wnull-dereference>
  $<$<COMPILE_LANG_AND_ID:C,GNU,Clang>:-Wall -Wextra -Wpedantic>)
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  target_compile_options(gpumem_warnings INTERFACE -Wthread-safety)
endif()
if(GPUMEM_WARNINGS_AS_ERRORS)
  target_compile_options(gpumem_warnings INTERFACE $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-Werror>
    $<$<COMPILE_LANG_AND_ID:C,GNU,Clang>:-Werror>)
endif()
