# PP_FUZZ=ON (top CMakeLists.txt): every C/C++ target is compiled for libFuzzer with ASan and
# UBSan (UB aborts, so the fuzzer sees it as a crash); only the harnesses link the fuzzer's main.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "PP_FUZZ needs clang (-DCMAKE_CXX_COMPILER=clang++), got ${CMAKE_CXX_COMPILER_ID}")
endif()
set(PP_SANITIZE -fsanitize=address,undefined -fno-sanitize-recover=undefined
  -fno-omit-frame-pointer)
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link;${PP_SANITIZE}>")
add_link_options("$<$<LINK_LANGUAGE:C,CXX>:-fsanitize=address,undefined>")
