"""The wmt workload against Python references on generated data: tokens equal
to Debian's python3-sentencepiece (add_eos, the 256 filter), packed train
rows equal to a port of AlgoPerf's pack_dataset, and the generator's and
trainer's contracts. The workload is driven through its wmt_dump tool.

    WMT_DUMP=<build>/workloads/wmt/wmt_dump /usr/bin/python3 -m pytest \\
        tests/python/test_wmt_tools.py

(or BATCHD_BIN=<build>/server/batchd, from which wmt_dump is found.)
"""

import json
import shutil
import subprocess
import sys

import pytest

spm = pytest.importorskip("sentencepiece")

from helpers import (MAX_LENGTH, WMT_TOOLS as TOOLS, generate_wmt,  # noqa: E402
                     make_wmt, python_tokens, wmt_dump_path)

sys.path.insert(0, TOOLS)
import wmt_data  # noqa: E402


def run_dump(data, split, *options, rows=None):
    cmd = [wmt_dump_path(), "--data", str(data), "--split", split]
    for o in options:
        cmd += ["--option", o]
    if rows is not None:
        cmd += ["--rows", str(rows)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return p


def dump_json(data, split, *options):
    p = run_dump(data, split, *options)
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()], p.stderr


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_wmt(tmp_path_factory.mktemp("wmt"), train=1200,
                    validation=200, test=40, shards=4, seed=3,
                    vocab_size=1000, threads=2)


def algoperf_pack(examples, length=MAX_LENGTH):
    """A port of AlgoPerf's pack_dataset / _pack_with_tf_ops to lists."""
    rows = []
    keys = ("inputs", "targets")

    def write(partial):
        row = {}
        for k in keys:
            for suffix in ("", "_position"):
                v = partial[k + suffix]
                row[k + suffix] = v + [0] * (length - len(v))
            seg, running = [], 0
            for tok, pos in zip(row[k], row[k + "_position"]):
                running += pos == 0
                seg.append(running * (tok != 0))
            row[k + "_segmentation"] = seg
        rows.append(row)

    for w0 in range(0, len(examples), length):  # padded_batch(length)
        partial = {k + s: [] for k in keys for s in ("", "_position")}
        for ex in examples[w0:w0 + length]:
            one = {}
            for k, seq in zip(keys, ex):
                seq = seq[:length]
                one[k] = seq[:sum(1 for t in seq if t != 0)]
            if not all(len(partial[k]) + len(one[k]) <= length for k in keys):
                write(partial)
                partial = {k + s: [] for k in keys for s in ("", "_position")}
            for k in keys:
                partial[k] += one[k]
                partial[k + "_position"] += list(range(len(one[k])))
        write(partial)
    return rows


@pytest.mark.parametrize("source", ["tfds", "text"])
def test_eval_tokens_equal_python_sentencepiece(data, source):
    kept, dropped = python_tokens(data, "validation")
    got, stderr = dump_json(data, "validation", f"source={source}")
    assert [(g["inputs"], g["targets"]) for g in got] == kept
    assert f"skipped_examples={dropped} " in stderr


def test_int64_tokens_are_the_same(data):
    got32, _ = dump_json(data, "test")
    got64, _ = dump_json(data, "test", "dtype=int64")
    assert got32 == got64 and got32


def test_train_rows_equal_algoperf_packing(data):
    kept, dropped = python_tokens(data, "train")
    assert dropped > 0  # the generator's long tail reaches past 256 tokens
    got, stderr = dump_json(data, "train")
    want = algoperf_pack(kept)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for k, v in w.items():
            assert g[k] == v, k
    assert f"skipped_examples={dropped} " in stderr
    # Cursors: windows of 256 kept pairs, rows counted from 0 in each.
    windows = [g["window"] for g in got]
    assert windows == sorted(windows)
    assert windows[-1] == (len(kept) - 1) // MAX_LENGTH


def test_generator_is_deterministic_and_wmt_shaped(data, tmp_path):
    again = generate_wmt(tmp_path / "again", train=1200, validation=200,
                         test=40, shards=4, seed=3)
    for rel in ["train.de", "validation.en",
                "wmt17_translate/de-en/1.0.0/"
                "wmt17_translate-train.tfrecord-00003-of-00004"]:
        assert (again / rel).read_bytes() == (data / rel).read_bytes(), rel
    pairs = list(wmt_data.read_pairs(str(data), "train"))
    assert len(pairs) == 1200
    # The TFDS shards and the text files hold the same pairs in order.
    text = (data / "train.de").read_bytes().split(b"\n")[:-1]
    assert [p[0] for p in pairs] == text
    words = [len(en.split()) for _, en in pairs]
    assert 20 <= sum(words) / len(words) <= 32
    assert any("ä".encode() in de or "ß".encode() in de for de, _ in pairs)


def test_model_has_default_ids(data):
    sp = spm.SentencePieceProcessor(
        model_file=str(data / "wmt_sentencepiece_model"))
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2)
    assert sp.get_piece_size() == 1000


def test_missing_model_is_a_clear_error(data):
    p = run_dump(data, "validation", "vocab=no_such_model")
    assert p.returncode == 1
    assert "no_such_model" in p.stderr and "not found" in p.stderr


def test_corrupt_shard_is_counted_not_fatal(data, tmp_path):
    d = tmp_path / "corrupt"
    shard_dir = d / "wmt14_translate" / "de-en" / "1.0.0"
    shard_dir.mkdir(parents=True)
    (d / "wmt_sentencepiece_model").write_bytes(
        (data / "wmt_sentencepiece_model").read_bytes())
    name = "wmt14_translate-test.tfrecord-00000-of-00001"
    raw = bytearray((data / "wmt14_translate" / "de-en" / "1.0.0" / name)
                    .read_bytes())
    raw[20] ^= 0xFF  # inside the first record's data
    (shard_dir / name).write_bytes(bytes(raw))
    got, stderr = dump_json(d, "test")
    kept, _ = python_tokens(data, "test")
    assert len(got) == len(kept) - 1
    assert "decode_errors=1" in stderr
    (shard_dir / name).write_bytes(bytes(raw[:-2]))  # now truncated too
    p = run_dump(d, "test")
    assert p.returncode == 1
    assert name in p.stderr and "truncated" in p.stderr


# Text where encoding word by word could go wrong if it were not exact:
# runs of spaces, leading and trailing spaces, tabs, no-break and other
# Unicode spaces, full-width letters and ligatures that NFKC rewrites,
# combining marks, zero-width characters, digits and punctuation.
TRICKY = [
    "  Guten   Morgen ,  Welt  ",
    "tab\tseparated\twords and\u00a0no-break\u2003em space",
    "\uff21\uff22\uff23 full-width and the \ufb01ne ligature",
    "Cafe\u0301 na\u00efve e\u0301te\u0301 \u200bzero\u200dwidth",
    "1,234.56 \u20ac \u00bd \u2460 \u00b2 (parenthesised) \"quoted\" \u2014 dash",
    "single",
    "\u3000ideographic\u3000space\u3000",
    "Stra\u00dfe \u00e4\u00f6\u00fc \u00c4\u00d6\u00dc " * 8,
]


def test_tricky_text_tokens_equal_python_sentencepiece(data, tmp_path):
    # The same model, a text-source validation split of tricky lines: the
    # workload's tokens (word cache and all) equal SentencePiece's own.
    d = tmp_path / "tricky"
    d.mkdir()
    shutil.copy(data / "wmt_sentencepiece_model", d / "wmt_sentencepiece_model")
    lines = TRICKY * 40  # past the cache's first checked sentences
    (d / "validation.de").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (d / "validation.en").write_text("\n".join(reversed(lines)) + "\n",
                                     encoding="utf-8")
    sp = spm.SentencePieceProcessor(
        model_file=str(data / "wmt_sentencepiece_model"))
    want = [(sp.encode(de, add_eos=True), sp.encode(en, add_eos=True))
            for de, en in zip(lines, reversed(lines))]
    got, _ = dump_json(d, "validation", "source=text")
    assert [(g["inputs"], g["targets"]) for g in got] == want
