# beaconkv-eval's sources (cpp/eval/eval.h says what each holds): cpp/CMakeLists.txt and the GPU
# check's build (scripts/gpu-check.sh) build the tool from this list.
set(BEACONKV_EVAL_SOURCES common.cpp main.cpp passkey.cpp quality.cpp reason.cpp speed.cpp task.cpp trace.cpp)
list(TRANSFORM BEACONKV_EVAL_SOURCES PREPEND "${CMAKE_CURRENT_LIST_DIR}/")
