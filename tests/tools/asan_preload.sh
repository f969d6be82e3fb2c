# Sourced by tests that run programs not built with the sanitizer (python3, an example built
# outside the tree) against a sanitizer build's libditrun.so: asan_preload BUILD prints the ASan
# runtime such a program must load first (nothing for other builds).
asan_preload() {
  grep -q "^DIT_SANITIZE:BOOL=ON" "$1/CMakeCache.txt" || return 0
  "$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$1/CMakeCache.txt")" -print-file-name=libasan.so
}
