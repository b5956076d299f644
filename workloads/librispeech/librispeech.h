// The librispeech workload: AlgoPerf's pre-processed LibriSpeech (its
// librispeech_conformer and librispeech_deepspeech workloads share the
// pipeline), read as datasets/librispeech_preprocess.py leaves it under
// data: {subset}.csv (header ",id", then "ROWINDEX,UTTERANCE_ID") and
// {subset}/{utt}_audio.npy (int64 [n], int16 values, n <= 320,000) +
// {subset}/{utt}_targets.npy (int32 [m], m <= 256, EOS last).
//
// Splits: train = train-clean-100 + train-clean-360 + train-other-500 in
// csv order (batchd's seeded shuffle); eval_train = AlgoPerf's subset of
// train, indices = list(range(N)); random.Random(seed).shuffle(indices);
// indices[:eval_train_examples], in that order; validation = dev-clean +
// dev-other; test = test-clean. A split's CSVs must all be there (AlgoPerf
// reads them all); one that is missing is refused by name.
//
// Tensors (the ring carries the stored values, not AlgoPerf's float32: the
// Python drop-in widens them, client/python/batchd/algoperf/librispeech.py):
//   audio          uint8 [B, 640000]: the samples as little-endian int16,
//                  zero after audio_lengths (4x smaller than float32 audio
//                  plus its float32 paddings)
//   audio_lengths  int32 [B]: samples stored (0 on padding)
//   targets        int32 [B, 256]: token ids, 0 after target_lengths
//   target_lengths int32 [B]
//   weights        float32 [B], evaluation splits: 1 real, 0 padding
//
// Options (kLibriSpeechWorkload's table holds the default and bounds):
//   eval_train_examples  size of the eval_train subset (AlgoPerf's
//                        num_eval_train_examples; at most N)
//
// A file that is not what AlgoPerf writes (truncated, another dtype or
// shape, audio outside int16) is counted in decode_errors and fails the
// stream with an error naming the file and the offset.
#ifndef BATCHD_WORKLOADS_LIBRISPEECH_LIBRISPEECH_H_
#define BATCHD_WORKLOADS_LIBRISPEECH_LIBRISPEECH_H_

#include <memory>

#include "workloads/workload_entry.h"

namespace batchd {

inline constexpr int64_t kLibriSpeechMaxAudio = 320000;
inline constexpr int64_t kLibriSpeechMaxTargets = 256;

extern const WorkloadEntry kLibriSpeechWorkload;

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_LIBRISPEECH_LIBRISPEECH_H_
