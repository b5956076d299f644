"""The digest test_librispeech.py and librispeech_ddp_check.py compare
LibriSpeech utterances by."""

import hashlib


def utterance_digest(batch, i):
    """The SHA-256 (hex) of utterance i of an AlgoPerf LibriSpeech batch
    (torch tensors): the bytes of its audio, audio paddings, targets and
    target paddings, as reference/librispeech_ref.py computes it."""
    audio, audio_paddings = batch["inputs"]
    targets, target_paddings = batch["targets"]
    digest = hashlib.sha256()
    for t in (audio[i], audio_paddings[i], targets[i], target_paddings[i]):
        digest.update(t.contiguous().numpy().tobytes())
    return digest.hexdigest()
