# The generator scripts' one way to write their output: only when the bytes differ, so an
# unchanged header keeps its time stamp and nothing that includes it is rebuilt.
function(dit_write_if_changed path content)
  if(EXISTS "${path}")
    file(READ "${path}" old)
    if(old STREQUAL content)
      return()
    endif()
  endif()
  file(WRITE "${path}" "${content}")
endfunction()
