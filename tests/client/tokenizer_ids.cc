// Test helper for tokenizer_hf_test.py: loads a tokenizer folder (argv[1]) and, for each line of
// stdin (a hex-encoded byte string), prints two lines: its ids (space-separated) and the hex of
// Decode of those ids. A load error goes to stderr with exit code 1.
#include <iostream>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "common/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: tokenizer_ids DIR < hex lines\n";
    return 2;
  }
  absl::StatusOr<pp::common::Tokenizer> tokenizer = pp::common::Tokenizer::Load(argv[1]);
  if (!tokenizer.ok()) {
    std::cerr << tokenizer.status().message() << "\n";
    return 1;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<int32_t> ids = tokenizer->Encode(absl::HexStringToBytes(line));
    absl::StatusOr<std::string> text = tokenizer->Decode(ids);
    std::cout << absl::StrJoin(ids, " ") << "\n"
              << (text.ok() ? absl::BytesToHexString(*text) : "error") << "\n";
  }
  return 0;
}
