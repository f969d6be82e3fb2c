# Generates the kernel ABI header OUT (one #define DIT_ABI_<NAME> a line) from the table DEF
# (compiler/kernels/dit_abi.def): the code generator includes it and NVRTC compiles against the
# same bytes, so the two sides cannot disagree.
file(STRINGS "${DEF}" lines)
set(body "")
set(count 0)
foreach(l IN LISTS lines)
  if(NOT l MATCHES "^DIT_ABI")
    continue()
  endif()
  if(NOT l MATCHES "^DIT_ABI\\(([A-Z][A-Z0-9_]*), (-?[0-9]+), \"([^\"]*)\"\\)$")
    message(FATAL_ERROR "${DEF}: expected DIT_ABI(NAME, integer, \"text\"), found: ${l}")
  endif()
  set(name ${CMAKE_MATCH_1})
  set(value ${CMAKE_MATCH_2})
  set(text "${CMAKE_MATCH_3}")
  if(text MATCHES "\\*/")
    message(FATAL_ERROR "${DEF}: ${name}: the text may not close a comment")
  endif()
  if(DEFINED seen_${name})
    message(FATAL_ERROR "${DEF}: ${name} defined twice")
  endif()
  set(seen_${name} 1)
  string(APPEND body "#define DIT_ABI_${name} ${value} /* ${text} */\n")
  math(EXPR count "${count} + 1")
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${DEF}: no DIT_ABI entries")
endif()
set(content "/* generated from compiler/kernels/dit_abi.def by cmake/kernel_abi.cmake: the kernel ABI */
#ifndef DIT_ABI_H
#define DIT_ABI_H
#define DIT_ABI_COUNT ${count}
${body}#endif
")
include(${CMAKE_CURRENT_LIST_DIR}/write_if_changed.cmake)
dit_write_if_changed("${OUT}" "${content}")
