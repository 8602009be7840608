#!/usr/bin/env bash
# Exit 0 when clang++ can link a libFuzzer harness with ASan and UBSan (Debian: clang and
# libclang-rt-14-dev), 1 otherwise.
command -v clang++ >/dev/null 2>&1 || exit 1
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
  clang++ -x c++ -fsanitize=fuzzer,address,undefined - -o /dev/null >/dev/null 2>&1
