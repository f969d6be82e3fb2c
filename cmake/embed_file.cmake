# Writes IN's bytes as a C array named NAME into OUT (so kernel templates ship inside ditc).
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" body "${body}")
set(content "/* generated from ${IN} by cmake/embed_file.cmake */\nstatic const char ${NAME}[${bytes} + 1] = {\n${body}0x00};\n")
include(${CMAKE_CURRENT_LIST_DIR}/write_if_changed.cmake)
dit_write_if_changed("${OUT}" "${content}")
