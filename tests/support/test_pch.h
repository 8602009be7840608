// The headers most test files include and spend most of their compile time parsing (gtest, gmock,
// gRPC and the generated protocol), compiled once into a precompiled header that every test
// executable reuses (tests/CMakeLists.txt, "Precompiled headers"). Test code must still include
// what it uses: builds without precompiled headers (-DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON, the
// fuzz build) compile the same files without this one.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "pp/v1/worker.grpc.pb.h"
