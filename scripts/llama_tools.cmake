# llama-server and llama-perplexity inside llama-cpp-python's own CMake tree, without the rest
# of llama.cpp's tools. scripts/build_llama_server.sh configures that tree again with
# -DCMAKE_PROJECT_llama.cpp_INCLUDE=this file, which CMake reads right after llama.cpp's
# project() call. The library targets stay defined as llama-cpp-python defines them, so none of
# their compile commands changes and nothing already compiled compiles again; the two programs
# link to them by name. (llama.cpp's LLAMA_BUILD_TOOLS cannot be used in that tree: its tools
# directory adds tools/mtmd, which llama-cpp-python adds itself.)
include_guard(GLOBAL)
# What llama.cpp's CMakeLists.txt sets next anyway: every program and library in build/bin.
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
find_package(Threads REQUIRED)
add_subdirectory(tools/ui)
add_subdirectory(tools/server)
add_subdirectory(tools/perplexity)
