#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/comm/transport.h"

namespace pp::comm {
namespace {

class TransportCollectives : public parallel::Collectives {
 public:
  explicit TransportCollectives(Transport* transport) : transport_(transport) {}

  int rank() const override { return transport_->rank(); }
  int size() const override { return transport_->size(); }

  absl::Status AllReduceSum(float* data, size_t n) override {
    return transport_->AllReduceSum(data, n);
  }

  absl::Status AllGather(const void* in, size_t bytes, void* out) override {
    absl::StatusOr<std::vector<std::string>> all =
        transport_->AllGather(std::string(static_cast<const char*>(in), bytes));
    if (!all.ok()) return all.status();
    for (int r = 0; r < size(); ++r) {
      if ((*all)[r].size() != bytes) {
        return absl::DataLossError(absl::StrCat("all-gather: rank ", r, " sent ", (*all)[r].size(),
                                                " bytes, want ", bytes));
      }
      std::memcpy(static_cast<char*>(out) + r * bytes, (*all)[r].data(), bytes);
    }
    return absl::OkStatus();
  }

 private:
  Transport* transport_;
};

}  // namespace

std::unique_ptr<parallel::Collectives> GroupCollectives(Transport* transport) {
  return std::make_unique<TransportCollectives>(transport);
}

}  // namespace pp::comm
