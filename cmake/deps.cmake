# Finds the project's dependencies; a missing one stops the configure with the Debian package
# that provides it (scripts/setup.sh installs them all).
find_package(Threads REQUIRED)

function(dit_require_lib target header lib package)
  find_path(${target}_INC ${header} PATHS ${ARGN} NO_CACHE)
  find_library(${target}_LIB ${lib} PATHS ${ARGN} NO_CACHE)
  if(NOT ${target}_INC OR NOT ${target}_LIB)
    message(FATAL_ERROR "missing dependency: ${header} / lib${lib} not found; install the Debian package '${package}' (scripts/setup.sh installs every dependency)")
  endif()
  add_library(dit::${target} UNKNOWN IMPORTED GLOBAL)
  set_target_properties(dit::${target} PROPERTIES IMPORTED_LOCATION ${${target}_LIB}
                        INTERFACE_INCLUDE_DIRECTORIES ${${target}_INC})
endfunction()

dit_require_lib(xxhash xxhash.h xxhash libxxhash-dev)
dit_require_lib(zstd zstd.h zstd libzstd-dev)
dit_require_lib(cjson cjson/cJSON.h cjson libcjson-dev)
get_target_property(DIT_CJSON_INCLUDE dit::cjson INTERFACE_INCLUDE_DIRECTORIES)
# The store's remote backend (HTTP client) and manifest signatures / SHA-256 (libcrypto).
dit_require_lib(curl curl/curl.h curl libcurl4-openssl-dev)
dit_require_lib(crypto openssl/evp.h crypto libssl-dev)
# Tokenizers: SentencePiece models through libsentencepiece (its C++ API, found by pkg-config),
# Unicode normalization, categories and case for CLIP's BPE through utf8proc.
find_package(PkgConfig REQUIRED)
pkg_check_modules(SENTENCEPIECE IMPORTED_TARGET sentencepiece)
if(NOT SENTENCEPIECE_FOUND)
  message(FATAL_ERROR "missing dependency: sentencepiece (pkg-config) not found; install the Debian package 'libsentencepiece-dev' (scripts/setup.sh installs every dependency)")
endif()
# The processor alone: pkg-config also lists the trainer library, which tokenizing never needs.
find_library(SENTENCEPIECE_LIB sentencepiece HINTS ${SENTENCEPIECE_LIBRARY_DIRS} NO_CACHE)
add_library(dit::sentencepiece UNKNOWN IMPORTED GLOBAL)
set_target_properties(dit::sentencepiece PROPERTIES IMPORTED_LOCATION ${SENTENCEPIECE_LIB}
                      INTERFACE_INCLUDE_DIRECTORIES "${SENTENCEPIECE_INCLUDE_DIRS}")
dit_require_lib(utf8proc utf8proc.h utf8proc libutf8proc-dev)
# Output files (runtime/media.c): PNG through libspng, H.264 MP4 through FFmpeg's libraries (their
# headers at build time; the libraries are loaded when an MP4 is written). Not optional as the
# HTTP server is: writing the result is generate's job and --preview's, and a build without them
# would refuse --out x.mp4 on some hosts only.
pkg_check_modules(SPNG IMPORTED_TARGET spng)
pkg_check_modules(FFMPEG IMPORTED_TARGET libavcodec libavformat libswscale libavutil)
if(NOT SPNG_FOUND)
  message(FATAL_ERROR "missing dependency: spng (pkg-config) not found; install the Debian package 'libspng-dev' (scripts/setup.sh installs every dependency)")
endif()
if(NOT FFMPEG_FOUND)
  message(FATAL_ERROR "missing dependency: libavcodec, libavformat, libswscale, libavutil (pkg-config) not found; install the Debian packages 'libavcodec-dev libavformat-dev libswscale-dev libavutil-dev' (scripts/setup.sh installs every dependency)")
endif()

if(DIT_MLIR)
  set(DIT_LLVM_ROOT /usr/lib/llvm-19 CACHE PATH "LLVM/MLIR 19 installation")
  find_path(MLIR_C_INC mlir-c/IR.h PATHS ${DIT_LLVM_ROOT}/include NO_DEFAULT_PATH NO_CACHE)
  find_library(MLIR_LIB MLIR PATHS ${DIT_LLVM_ROOT}/lib NO_DEFAULT_PATH NO_CACHE)
  if(NOT MLIR_C_INC OR NOT MLIR_LIB)
    message(FATAL_ERROR "missing dependency: MLIR 19 C API (mlir-c/IR.h, libMLIR) not found under ${DIT_LLVM_ROOT}; install the Debian packages 'libmlir-19-dev' and 'llvm-19-dev', or configure with -DDIT_MLIR=OFF")
  endif()
  # Debian's libMLIR.so exports MLIR's C++ API but not its C API: the C API comes from the
  # static libMLIRCAPI*.a archives, linked against libMLIR.so and libLLVM.so (whose C++
  # symbols they call) and the C++ runtime.
  find_library(LLVM_SHLIB LLVM PATHS ${DIT_LLVM_ROOT}/lib NO_DEFAULT_PATH NO_CACHE)
  set(DIT_MLIR_CAPI_LIBS)
  foreach(part RegisterEverything GPU IR)
    find_library(MLIR_CAPI_${part} libMLIRCAPI${part}.a PATHS ${DIT_LLVM_ROOT}/lib NO_DEFAULT_PATH NO_CACHE)
    if(NOT MLIR_CAPI_${part} OR NOT LLVM_SHLIB)
      message(FATAL_ERROR "missing dependency: libMLIRCAPI${part}.a / libLLVM.so not found under ${DIT_LLVM_ROOT}/lib; install the Debian packages 'libmlir-19-dev' and 'llvm-19-dev', or configure with -DDIT_MLIR=OFF")
    endif()
    list(APPEND DIT_MLIR_CAPI_LIBS ${MLIR_CAPI_${part}})
  endforeach()
  add_library(dit::mlir INTERFACE IMPORTED GLOBAL)
  set_target_properties(dit::mlir PROPERTIES
                        INTERFACE_LINK_LIBRARIES "${DIT_MLIR_CAPI_LIBS};${MLIR_LIB};${LLVM_SHLIB};stdc++"
                        INTERFACE_INCLUDE_DIRECTORIES ${MLIR_C_INC})
endif()

if(DIT_CUDA)
  set(DIT_CUDA_ROOT /usr/local/cuda CACHE PATH "CUDA toolkit root")
  find_path(NVRTC_INC nvrtc.h PATHS ${DIT_CUDA_ROOT}/include NO_DEFAULT_PATH)
  find_library(NVRTC_LIB nvrtc PATHS ${DIT_CUDA_ROOT}/lib64 NO_DEFAULT_PATH NO_CACHE)
  find_library(NVJITLINK_LIB nvJitLink PATHS ${DIT_CUDA_ROOT}/lib64 NO_DEFAULT_PATH NO_CACHE)
  if(NOT NVRTC_INC OR NOT NVRTC_LIB OR NOT NVJITLINK_LIB)
    message(FATAL_ERROR "missing dependency: NVRTC / nvJitLink not found under ${DIT_CUDA_ROOT}; install the CUDA toolkit (12.x or 13.x) there, or configure with -DDIT_CUDA=OFF")
  endif()
  add_library(dit::nvrtc INTERFACE IMPORTED GLOBAL)
  set_target_properties(dit::nvrtc PROPERTIES INTERFACE_LINK_LIBRARIES "${NVRTC_LIB};${NVJITLINK_LIB}"
                        INTERFACE_INCLUDE_DIRECTORIES ${NVRTC_INC})
endif()
