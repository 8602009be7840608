// The data a job trains and evaluates on (DataSpec in proto/pp/v1/job.proto): the rules of its
// fields, glob resolution and the checks of its files. docs/jobs.md "Data windows" is the user's
// side of it; worker/data/data.h reads what this admits.
//
// Shapes. A DataSpec is a stream or a mix:
// - a stream is format "generated" (its path and paths unread), or exactly one of `path` (one
//   file or a glob) and `paths` (files or globs, read in this order): its files, concatenated in
//   order, are one sequence of tokens;
// - a mix is `mix` (without path or paths): weighted streams (each a DataSpec with neither a mix
//   nor a tokenizer); the mix's format is only its sources' default. Only `data` may be a mix;
//   eval.data is a stream.
// Globs. A path with * ? or [ in any component is a pattern for glob(3); its matches, in byte
// order of their names, take its place. A pattern matching nothing is refused, and so is a match
// whose name holds * ? or [ (it would read as a pattern again once resolved: ResolveDataGlobs
// must be idempotent). A path without those characters names one file.
//
// Contract:
// - ApplyDataDefaults and ValidateDataFields read no file (ppcoord runs them under its lock).
// - ResolveDataGlobs expands every pattern (data, each mix source, eval.data) into an explicit
//   `paths` list and clears `path` where it held a pattern; a spec without patterns is returned
//   unchanged, so resolving twice gives what resolving once gave. It lists folders (glob(3)) but
//   opens no file: roots are CheckDataFiles' business.
// - CheckDataFiles opens every file (after expanding any pattern the same way) under `roots`
//   (common/path_roots.h OpenUnderRoots: inside a root, no symlink out, regular files only),
//   checks its format (llmc: LlmcTokenCount's header checks) and that every id is below
//   common::RealVocabSize (bytes: it must be >= 256), which reads every uint16 and llmc file
//   whole, by pread in 1 MiB chunks (never mapped); data.tokenizer must be a folder under the
//   roots holding tokenizer.json, or vocab.json and merges.txt, that common::Tokenizer::Load
//   loads, with vocab_size() at most the real vocabulary. It blocks on the disk: no lock held.
// - Every error is InvalidArgument, one line, starting with the field ("data.paths[1]",
//   "data.mix[0].data.path", "eval.data.path"), then the file and what is wrong, never the
//   files' bytes: "data.paths[1]: /d/b.bin: not an llm.c token shard: magic 7, expected 20240520".
// Documents (data.documents "mask", model.positions "document"; worker/data/data.h "Documents"):
// only the top-level data says how a window splits into documents (a mix source or eval.data
// that sets documents or end_of_text is refused: evaluation must see the mask training sees).
// The end-of-text id is data.end_of_text when set, else 0 (the byte \0) for bytes and generated
// data; with data.tokenizer ResolveEndOfText (ppcoord at submit, ppctl train) stores the
// tokenizer's <|endoftext|>; uint16 or llmc data with neither is refused.
// Thread-safe: no state.
#ifndef PP_COMMON_DATA_SPEC_H_
#define PP_COMMON_DATA_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pp/v1/job.pb.h"

namespace pp::common {

// Of data and eval.data: format "" -> "bytes"; a mix source's "" -> the mix's format (so `format`
// beside `mix` is its sources' default); generated_tokens 0 -> 1 MiB for format "generated".
void ApplyDataDefaults(pp::v1::JobSpec* spec);

// The field rules above for data and, when set, eval.data (a stream), the bounds of its paths and
// weights (common/spec_bounds.h), data.tokenizer's value (not its folder), and no
// eval.holdout_fraction beside a mix (a mix has no one stream whose tail could be held out), and
// the documents fields (above, with model.positions). REQUIRES ApplyDataDefaults ran.
absl::Status ValidateDataFields(const pp::v1::JobSpec& spec);

// Whether `spec` packs documents (data.documents "mask"): attention is block-causal per document.
bool MasksDocuments(const pp::v1::JobSpec& spec);
// The end-of-text id: data.end_of_text when set, else 0, the default of bytes and generated data.
// A validated spec whose data is uint16 or llmc with documents "mask" has it set (by the user, or
// by ResolveEndOfText from data.tokenizer), so workers need only this pure function.
int32_t EndOfTextId(const pp::v1::JobSpec& spec);
// `spec` with data.end_of_text set when it packs documents and leaves the id unset:
// data.tokenizer's
// <|endoftext|> (loaded from its folder: call after CheckDataFiles checked it under the roots), or
// 0 for byte data; unchanged otherwise, so resolving twice gives what resolving once gave.
// InvalidArgument "data.end_of_text: ..." when the tokenizer has no <|endoftext|>.
absl::StatusOr<pp::v1::JobSpec> ResolveEndOfText(pp::v1::JobSpec spec);

// One file of a stream, with the field that named it (in errors: "data.paths[2]").
struct DataFile {
  std::string field;
  std::string path;
};

// The files of a stream (REQUIRES not a mix, not generated), patterns expanded, in stream order.
// `field`: the stream's field ("data", "data.mix[1].data").
absl::StatusOr<std::vector<DataFile>> StreamFiles(absl::string_view field,
                                                  const pp::v1::DataSpec& data);

// `spec` with every pattern of data and eval.data resolved (above). With `roots` (ppcoord's
// --data_root) a pattern must be absolute, without "..", and its folder before the first pattern
// component under a root (common/path_roots.h CheckUnderRoots), checked before anything is listed:
// a glob never probes the disk outside the roots. Empty `roots`: no rule (ppctl train).
absl::StatusOr<pp::v1::JobSpec> ResolveDataGlobs(pp::v1::JobSpec spec,
                                                 const std::vector<std::string>& roots = {});

// Checks every data file of `spec` (data, eval.data when eval is on, data.tokenizer) as above,
// each stream's tokens against model.seq_len + 1 and an eval holdout's windows, and returns K,
// the training windows of an epoch (common/epoch.h): of one stream TrainWindowCount of its
// tokens; of a mix the sum of its sources' N_i - T. REQUIRES ValidateDataFields OK.
absl::StatusOr<int64_t> CheckDataFiles(const pp::v1::JobSpec& spec,
                                       const std::vector<std::string>& roots);

// Every relative path of data and eval.data (path, paths, mix sources, tokenizer) made absolute
// against the current folder, globs kept: what a client does before it submits, since the
// daemons run elsewhere.
void AbsoluteDataPaths(pp::v1::JobSpec* spec);

// The files a data spec names, as (field, path), patterns as written: every path and paths
// entry of the stream or of each mix source, and the tokenizer folder. For SpecInputPaths.
std::vector<std::pair<std::string, std::string>> DataInputPaths(absl::string_view field,
                                                                const pp::v1::DataSpec& data);

}  // namespace pp::common

#endif  // PP_COMMON_DATA_SPEC_H_
