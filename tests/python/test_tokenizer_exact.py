"""WMT token ids are exactly whole-sentence SentencePiece, ties included, for
any index_threads; invalid UTF-8 is tokenized as AlgoPerf's tensorflow-text
does. The workload is driven through its wmt_dump tool, as users run it; the
reference is Debian's python3-sentencepiece (EncodeAsIds of the whole
sentence + EOS) and, when the bench venv has it, tensorflow-text itself.

    WMT_DUMP=<build>/workloads/wmt/wmt_dump /usr/bin/python3 -m pytest \\
        tests/python/test_tokenizer_exact.py

(or BATCHD_BIN=<build>/server/batchd, from which wmt_dump is found;
BATCHD_BENCH_VENV names the tensorflow-text venv, default
~/.cache/batchd-bench-venv, as bench/wmt_bench.sh makes it.)
"""

import json
import os
import random
import subprocess

import pytest

spm = pytest.importorskip("sentencepiece")

from helpers import generate_wmt, wmt_dump_path  # noqa: E402

# Characters whose runs make Viterbi ties: when "c" and "cc" are both
# pieces, "ccc" is c+cc or cc+c, the same score summed in another order,
# and which one float rounding prefers depends on the running score of the
# text before the word. WMT has such runs ("]]]] ]]] ]]", "-- ---------").
RUN_CHARS = list("]-.+=*#_~!?/\\|") + ["X", "l", "e"]


def dump(data, split, *options):
    cmd = [wmt_dump_path(), "--data", str(data), "--split", split]
    for o in options:
        cmd += ["--option", o]
    p = subprocess.run(cmd, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return ([json.loads(line) for line in p.stdout.splitlines()],
            p.stderr.decode(errors="replace"))


def per_word(sp, sentence):
    """The ids a per-word cache would give: each word encoded alone."""
    return [i for w in sentence.split(" ") if w for i in sp.encode(w)]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A unigram model (AlgoPerf's settings) trained on generated WMT-like
    text plus seeded lines with runs of punctuation and letters, as web
    crawls have; and a pool of generated plain sentences."""
    d = tmp_path_factory.mktemp("exact")
    gen = d / "gen"
    generate_wmt(gen, train=1200, validation=100, test=10, shards=2, seed=3)
    lines = [l for name in ("train.de", "train.en")
             for l in (gen / name).read_text(encoding="utf-8").splitlines()]
    rng = random.Random(7)
    noise = []
    for _ in range(600):
        c = rng.choice(RUN_CHARS)
        runs = [c * rng.randint(1, 12) for _ in range(rng.randint(1, 4))]
        noise.append(rng.choice(lines)[:60] + " " + " ".join(runs))
    corpus = d / "corpus.txt"
    corpus.write_text("\n".join(lines + noise) + "\n", encoding="utf-8")
    # num_threads=1: the same model on every run.
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(d / "m"), vocab_size=1000,
        model_type="unigram", character_coverage=1.0, num_threads=1,
        minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(d / "m.model"))
    plain = (gen / "validation.en").read_text(encoding="utf-8").splitlines()
    return d / "m.model", sp, plain, lines


@pytest.fixture(scope="module")
def ties(model):
    """Words whose lone encoding is not what the sentence gives them in some
    context, found by a small search over runs; word -> such sentences."""
    _, sp, plain, _ = model
    found = {}
    for c in RUN_CHARS:
        for n in range(2, 13):
            w = c * n
            for ctx in plain[:30]:
                for s in (ctx + " " + w, ctx + " " + w + " " + w):
                    if sp.encode(s) != per_word(sp, s):
                        found.setdefault(w, []).append(s)
    return found


def data_dir(tmp_path, model_path, name):
    d = tmp_path / name
    d.mkdir()
    (d / "wmt_sentencepiece_model").write_bytes(model_path.read_bytes())
    return d


def tie_corpus(model, ties):
    """300 plain sentences where word by word happens to be right first (so
    a cache that checks the first 256 sentences sees no difference), then
    every tie sentence, each followed by a generated one."""
    _, sp, _, lines = model
    safe = [l for l in lines if sp.encode(l) == per_word(sp, l)]
    out = safe[:300]
    for sentences in ties.values():
        for s in sentences[:8]:
            out += [s, lines[len(out) % len(lines)]]
    return out


def shifted(lines):
    """The English side: the corpus moved by one line, so that both sides
    start with plain sentences."""
    return lines[1:] + lines[:1]


def test_search_finds_ties_where_word_by_word_differs(model, ties):
    _, sp, _, _ = model
    assert len(ties) >= 1, "no tie words found: the search or model changed"
    sentences = [s for v in ties.values() for s in v]
    assert all(sp.encode(s) != per_word(sp, s) for s in sentences)


@pytest.mark.parametrize("threads", [1, 2, 8])
def test_tie_sentences_equal_whole_sentence_sentencepiece(
        model, ties, tmp_path, threads):
    model_path, sp, _, _ = model
    lines = tie_corpus(model, ties)
    # The tie words are in the corpus, where encoding word by word is wrong.
    for w in ties:
        assert any(w in l.split(" ") for l in lines), w
    wrong = sum(sp.encode(l) != per_word(sp, l) for l in lines)
    assert wrong >= len(ties)
    d = data_dir(tmp_path, model_path, "ties")
    en = shifted(lines)
    (d / "validation.de").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (d / "validation.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    # AlgoPerf's filter: pairs over 256 tokens are dropped.
    want = [(sp.encode(de, add_eos=True), sp.encode(e, add_eos=True))
            for de, e in zip(lines, en)]
    want = [w for w in want if max(map(len, w)) <= 256]
    for run in range(2):
        got, _ = dump(d, "validation", "source=text",
                      f"index_threads={threads}")
        pairs = [(g["inputs"], g["targets"]) for g in got]
        assert len(pairs) == len(want)
        bad = [i for i, (g, w) in enumerate(zip(pairs, want)) if g != w]
        assert not bad, (f"run {run}, {threads} threads: {len(bad)} pairs "
                         f"differ, first at pair {bad[0]}")


def test_train_rows_do_not_depend_on_index_threads(model, ties, tmp_path):
    model_path, _, _, _ = model
    lines = tie_corpus(model, ties)
    d = data_dir(tmp_path, model_path, "train")
    (d / "train.de").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (d / "train.en").write_text("\n".join(shifted(lines)) + "\n",
                                encoding="utf-8")
    runs = {}
    for threads in (1, 2, 8):
        for run in range(2):
            rows, _ = dump(d, "train", "source=text",
                           f"index_threads={threads}")
            assert rows
            runs[(threads, run)] = rows
    first = runs[(1, 0)]
    for key, rows in runs.items():
        assert rows == first, key


# Bytes that are not UTF-8: a stray continuation byte, a lead byte cut
# short, an overlong '/', a surrogate, 0xff, a run of them, and one at the
# very end.
INVALID = [
    b"der Rat \x80 tagt",
    b"Stra\xc3 und Haus",
    b"\xc0\xaf Pfad",
    b"ein \xed\xa0\x80 Zeichen",
    b"\xff\xfe\xfd drei",
    b"ab\xffcd x\xc3",
    b"ganz normal",
]


def tensorflow_text_ids(model_path, texts):
    """tensorflow-text's SentencepieceTokenizer (AlgoPerf's tokenizer), in
    the bench venv; None when the venv has no tensorflow-text."""
    venv = os.environ.get("BATCHD_BENCH_VENV",
                          os.path.expanduser("~/.cache/batchd-bench-venv"))
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        return None
    code = (
        "import json, sys\n"
        "import tensorflow as tf, tensorflow_text as tft\n"
        "m = open(sys.argv[1], 'rb').read()\n"
        "t = tft.SentencepieceTokenizer(model=m, add_bos=False, add_eos=True)\n"
        "texts = [bytes.fromhex(h) for h in sys.argv[2:]]\n"
        "print(json.dumps(t.tokenize(tf.constant(texts)).to_list()))\n")
    p = subprocess.run([python, "-c", code, str(model_path)] +
                       [t.hex() for t in texts],
                       capture_output=True, timeout=300)
    if p.returncode != 0:
        if b"No module named" in p.stderr:
            return None
        pytest.fail(p.stderr.decode(errors="replace")[-2000:])
    return json.loads(p.stdout.splitlines()[-1])


def test_invalid_utf8_is_tokenized_as_tensorflow_text_does(model, tmp_path):
    model_path, sp, _, _ = model
    d = data_dir(tmp_path, model_path, "invalid")
    en = [b"the council", b"street", b"path", b"sign", b"three", b"x", b"y"]
    (d / "validation.de").write_bytes(b"\n".join(INVALID) + b"\n")
    (d / "validation.en").write_bytes(b"\n".join(en) + b"\n")
    # Default: every pair kept; ids of SentencePiece on the raw bytes (each
    # bad byte U+FFFD, unknown, a run of unknowns one unk id).
    want = [(sp.encode(de, add_eos=True), sp.encode(e, add_eos=True))
            for de, e in zip(INVALID, en)]
    assert sum(ids.count(sp.unk_id()) for ids, _ in want) >= 6
    got, stderr = dump(d, "validation", "source=text", "index_threads=2")
    assert [(g["inputs"], g["targets"]) for g in got] == want
    assert "decode_errors=0" in stderr
    tf_ids = tensorflow_text_ids(model_path, INVALID)
    if tf_ids is not None:
        assert [g["inputs"] for g in got] == tf_ids
    # invalid_utf8=drop: the old behaviour, counted as decode errors.
    got, stderr = dump(d, "validation", "source=text", "invalid_utf8=drop")
    assert [g["inputs"] for g in got] == [want[-1][0]]
    assert "decode_errors=6" in stderr
    p = subprocess.run([wmt_dump_path(), "--data", str(d), "--option",
                        "invalid_utf8=keep"], capture_output=True, text=True)
    assert p.returncode != 0 and "invalid_utf8" in p.stderr


def test_tensorflow_text_reference_gives_sentencepiece_ids(model):
    """The reference the invalid-UTF-8 test compares with, checked so that
    it can fail: a bench venv that exists must have tensorflow-text, and
    on valid text its ids must be whole-sentence SentencePiece's + EOS (if
    they were not, that comparison would prove nothing). Skips, saying so,
    only where there is no bench venv at all."""
    model_path, sp, plain, _ = model
    venv = os.environ.get("BATCHD_BENCH_VENV",
                          os.path.expanduser("~/.cache/batchd-bench-venv"))
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        pytest.skip(f"no tensorflow-text venv at {venv} "
                    "(bench/wmt_bench.sh creates it)")
    texts = [line.encode() for line in plain[:20]]
    got = tensorflow_text_ids(model_path, texts)
    assert got is not None, (
        f"the venv {venv} has no tensorflow-text: remove it and rerun "
        "bench/wmt_bench.sh, which makes it")
    assert got == [sp.encode(t.decode(), add_eos=True) for t in texts]
