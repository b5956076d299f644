// The WMT workload (AlgoPerf's `wmt`): German→English pairs, SentencePiece
// tokens with EOS, pairs over max_length tokens dropped; the train split
// packs rows as AlgoPerf's pack_dataset does, the eval splits pad one pair
// per row and carry weights.
//
// Config:
//   data_path  a directory; see pair_source.h for how data + split map to
//              files (TFDS shards or <split>.de / <split>.en).
//   split      "train" (packed, shuffled, repeated), "validation" or "test"
//              (one pass, in order), or "eval_train": the first
//              eval_train_examples kept pairs of the train files in file
//              order, padded and weighted as the eval splits (AlgoPerf
//              draws its eval_train from the same head of train through a
//              1024-pair shuffle buffer; see batchd.algoperf).
// Options (kWmtWorkload's table in wmt.cc holds each one's default and
// bounds; batchd --help prints them):
//   vocab        the SentencePiece model, relative to data_path (no "..",
//                not absolute).
//   source       auto, tfds or text (auto: TFDS when present).
//   dtype        int32 or int64, of the token tensors.
//   max_length   row length, length filter and packing window.
//   skip_empty   1: drop pairs with an empty side (counted as skipped);
//                0 keeps them as AlgoPerf does (EOS alone).
//   index_threads  how many of the daemon's indexing threads (batchd
//                --index-threads; base/executor.h) one stream's length pass
//                and first windows may use at once: a bound on its share of
//                a fixed pool, never a count of threads to start; 0 or more
//                than the pool has: all of them. The token ids do not
//                depend on it.
//   invalid_utf8 encode or drop: what becomes of a pair with bytes that are
//                not well-formed UTF-8. encode tokenizes them as AlgoPerf's
//                tensorflow-text SentencePiece op does (each bad byte is
//                U+FFFD, an unknown piece: the unk id, a run of them one
//                unk id), so batchd feeds the pairs AlgoPerf feeds; drop
//                counts the pair as a decode error and drops it.
//   eval_train_examples  pairs of the eval_train split (AlgoPerf's
//                num_eval_train_examples).
//
// Tensors, [B, max_length] each:
//   train: inputs, targets, inputs_position, inputs_segmentation,
//          targets_position, targets_segmentation (dtype)
//   eval:  inputs, targets (dtype), weights (float32: targets > 0 on real
//          rows, 0 on the padding rows of the last batch)
//
// Counters: skipped_examples counts pairs dropped for length (and empty ones
// with skip_empty); decode_errors counts records that cannot be used (CRC
// mismatch, malformed Example, no `de`/`en`, invalid UTF-8 with
// invalid_utf8=drop). Both are
// dropped like long pairs, so the rows stay deterministic. A train row
// counts the drops of its window when it is the window's first row; an eval
// row counts those just before its pair.
//
// Train epochs: the permutation of all N records (the determinism
// contract), dropped pairs removed, then windows of max_length kept pairs.
// Unlike AlgoPerf, whose `repeat` precedes packing, a window never spans two
// epochs. The train split's schedule is a PackedSchedule (its items are
// rows; the workload is its RowPacking, workloads/packed_schedule.h).
// Packing needs every pair's packed length (4 bytes per pair, kept): the
// first use starts a length pass over every pair, in file order, as
// background work of the daemon's executor (nice +10, on index_threads of
// its threads), owned by a LengthIndex (length_index.h) that every stream
// of the same data shares, so that a second stream joins the running pass.
// While it runs, the schedule asks RowsUpTo for the epoch's first rows
// only: the pairs of those windows are tokenized then (in the epoch's
// order, as serving work), so the first batches of a never-seen set come
// in seconds; the windows are cut by the same code as once every length is
// known, so the rows are the same.
// After the pass RowsInEpoch is arithmetic over lengths, and filling a row
// tokenizes only its row's pairs.
// With a cache (WorkloadConfig::cache) the lengths table is loaded from it
// (kind "wmt-lengths", keyed by every input file's identity, the model's
// bytes and the options that change lengths; length_cache.h), or built once
// under the entry's build lock, which other streams and daemons on the
// same cache wait for (serving their own first windows meanwhile), and
// stored. In a daemon (WorkloadConfig::shared) the pass then runs to its
// end even after every stream of the data has closed, and then counts and
// stores the first epochs' row counts of the seeds its streams used; only
// the daemon's shutdown stops it early, and a pass stopped early stores
// what it learnt, which the next open takes up. A cache that cannot be used is
// a warning: the pass runs without it. The pass also stores every kept pair's
// token ids (kind "wmt-tokens", a blob), from which rows are then made without
// reading the text or tokenizing. Text sources keep their line offsets there
// too (pair_source.h), and each train epoch's row count once it is counted
// (kind "wmt-epoch-rows"), which RowsInEpoch reads before packing the epoch: a
// restarted daemon resuming far ahead packs no earlier epoch. The rows are the
// same with and without any of it.
//
// Read-ahead (server/readahead.h): with TFDS shards, the records of the
// pairs a step reads are read ahead, keyed by the pair's position in the
// epoch's order (train rows: PackedSchedule::ExamplesOf asks
// ExamplesOfRows, which answers from the epoch's table once it is built)
// or by the eval example; FillItem parses what was read ahead. Text files
// are not read ahead, nor rows made from stored token ids.
//
// The SentencePiece model is checked before SentencePiece loads it
// (sentencepiece_vocab.h's limits), loaded on the executor, shared by the
// daemon's streams of the same model bytes and charged to its budget of
// model memory (resident_bytes()).
//
// The parts: wmt_options.h (the options as the parts use them),
// pair_reader.h (the one pair source and tokenizer both halves read
// through), wmt_train.h (the train workload: packed rows, cursors, its
// LengthIndex and EpochTableCache, epoch_tables.h) and wmt_eval.h (the eval
// workload: padded pairs, nothing mutable after Create). The entry's
// factory (wmt.cc) builds one of the two from the options and split
// CreateWorkload parsed (workloads/workload_entry.h).
//
// Thread safety: as Workload; the length table and the per-epoch window
// tables are built under their own mutexes.
#ifndef BATCHD_WORKLOADS_WMT_WMT_H_
#define BATCHD_WORKLOADS_WMT_WMT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "workloads/workload_entry.h"

namespace batchd {

extern const WorkloadEntry kWmtWorkload;

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WMT_WMT_H_
