# The CMake options of every llama.cpp build of this project, in one place. scripts/build-llama.sh
# and scripts/compare-unpatched.sh pass this file first (`cmake -C FILE -D...`), so that a -D after
# it (a caller's own, or build-llama.sh --cmake "...") wins; cpp/CMakeLists.txt (subdir mode) and
# the GPU check's build (scripts/gpu-check.sh, which packs this file) include() it before
# add_subdirectory() of the tree. Every value is FORCEd, so that a changed value here reaches an
# existing build dir. Callers add only what is theirs: the library's path (LLAMA_BEACONKV_LIB,
# LLAMA_BEACONKV_INCLUDE_DIR), the release number, a GPU backend, the targets they build.
set(CMAKE_BUILD_TYPE      Release CACHE STRING "" FORCE)
# portable x86-64 code (ggml's AVX2/FMA defaults), the same on every machine: the GPU check's CPU
# reference and the dry run then agree bit for bit
set(GGML_NATIVE           OFF CACHE BOOL "" FORCE)
set(BUILD_SHARED_LIBS     OFF CACHE BOOL "" FORCE)
set(GGML_RPC              ON  CACHE BOOL "" FORCE)
# libllama-common and the tools (only the targets a caller names are built)
set(LLAMA_BUILD_COMMON    ON  CACHE BOOL "" FORCE)
set(LLAMA_BUILD_TOOLS     ON  CACHE BOOL "" FORCE)
set(LLAMA_BUILD_SERVER    ON  CACHE BOOL "" FORCE)
set(LLAMA_BUILD_TESTS     OFF CACHE BOOL "" FORCE)
set(LLAMA_BUILD_EXAMPLES  OFF CACHE BOOL "" FORCE)
set(LLAMA_BUILD_APP       OFF CACHE BOOL "" FORCE)
# no web UI (built or downloaded), no OpenSSL: the build needs no network and no npm
set(LLAMA_BUILD_UI        OFF CACHE BOOL "" FORCE)
set(LLAMA_USE_PREBUILT_UI OFF CACHE BOOL "" FORCE)
set(LLAMA_OPENSSL         OFF CACHE BOOL "" FORCE)
