// The integration tests' fixture: the shared cluster fixture (tests/support) with the tiny job
// spec every test starts from.
#ifndef PP_TESTS_INTEGRATION_FIXTURE_H_
#define PP_TESTS_INTEGRATION_FIXTURE_H_

#include <algorithm>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/substitute.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "pp/v1/job.pb.h"
#include "program/schedules.h"
#include "tests/support/fixture.h"

namespace pp::integration {

// A schedule and its chunks per rank, as the parameterised integration tests run them.
struct Layout {
  const char* schedule;
  int chunks;
};
inline void PrintTo(const Layout& layout, std::ostream* os) {
  *os << layout.schedule << " V=" << layout.chunks;
}
// Every schedule a job may train with (the table's rows that train), each at its default chunks.
inline std::vector<Layout> TrainingLayouts() {
  std::vector<Layout> layouts;
  for (const prog::ScheduleKind& kind : prog::Schedules()) {
    if (kind.trains) layouts.push_back({kind.name.c_str(), kind.default_chunks});
  }
  return layouts;
}
inline auto EverySchedule() { return ::testing::ValuesIn(TrainingLayouts()); }
// The test's name for a layout: the schedule with '_' for '-'.
inline std::string LayoutName(const ::testing::TestParamInfo<Layout>& info) {
  std::string name = info.param.schedule;
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

// `text` cut into \0-separated documents whose lengths cycle through shorter than T = 16, longer
// than T (cut by windows, or split into pieces when packed), and zero ("\0\0").
inline std::string PackDocuments(const std::string& text) {
  constexpr int kLengths[] = {5, 40, 0, 11, 23, 1, 0, 0, 16, 70, 3, 15, 17, 9};
  std::string packed;
  size_t at = 0;
  for (int i = 0; at < text.size(); ++i) {
    const size_t n = std::min<size_t>(kLengths[i % std::size(kLengths)], text.size() - at);
    packed.append(text, at, n);
    packed.push_back('\0');
    at += n;
  }
  return packed;
}

class IntegrationTest : public testing_support::ClusterTest {
 protected:
  // 6 blocks (8 partition units: D=4 with V=2 fits), C=32, T=16, M=8 microbatches of 2.
  pp::v1::JobSpec TinySpec(const std::string& schedule, int chunks, int steps) const {
    return SpecFrom(absl::Substitute(
        R"pb(
          name: "tiny"
          model { seq_len: 16 d_model: 32 n_heads: 2 n_layers: 6 }
          parallel { pipeline: 4 chunks: $1 schedule: "$0" }
          train { steps: $2 microbatches: 8 microbatch_size: 2 seed: 3 }
        )pb",
        schedule, chunks, steps));
  }

  std::string WriteSpec(const pp::v1::JobSpec& spec, const std::string& file) const {
    std::string json;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(spec, &json).ok());
    const std::string path = (dir_ / file).string();
    std::ofstream(path) << json;
    return path;
  }
};

}  // namespace pp::integration

#endif  // PP_TESTS_INTEGRATION_FIXTURE_H_
