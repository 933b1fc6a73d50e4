#!/usr/bin/env python3
# tokenize_flags_ref.py: the reference side of tests/sh/tokenize_flags.sh: with the `tokenizers`
# library, trains byte-level BPE tokenizers with an NFC normalizer (Qwen2's pre-tokenizer) and a
# SentencePiece-style one with NFC in LLaMA-2's normalizer sequence, adds tokens with each flag
# (lstrip, rstrip, single_word, normalized, special) as variants, and writes each tokenizer.json,
# documents that are not NFC or sit around the added tokens (JSON lines), and the library's ids as
# an llm.c token file (the separator before each document).
# Usage: python3 tests/tokenize_flags_ref.py CORPUS OUTDIR    (exit 3: the library is missing)
import array, json, sys, unicodedata

try:
    from tokenizers import Tokenizer, AddedToken, Regex, models, normalizers, pre_tokenizers
    from tokenizers import decoders, trainers
except ImportError:
    sys.exit(3)

corpus, out = sys.argv[1], sys.argv[2]
text = open(corpus, encoding="utf-8", errors="replace").read()
docs = [d for d in text.split("\n\n") if d.strip()][:600]
# text that NFC changes: decomposed accents, marks out of order, singletons, exclusions, jamo
nfd = [unicodedata.normalize("NFD", d) for d in [
       "café naïve Ünïcödé résumé", "Ελληνικά ἄλφα",
       "한국어 텍스트", "Å Ω ﬁ", "tiếng Việt"]]
non_nfc = nfd + ["a\u0301\u0323 e\u0323\u0302", "\u212b\u2126 \u0958\u0959",
                 "\u1100\u1161\u11a8 \u1112\u1161\u11ab", "\u0301leading mark", "x\u0344y"]
# text around the added tokens: touching letters, digits, '_', punctuation, spaces on each side
around = []
for t in ["<m>", "[X]", "caf\u00e9", "cafe\u0301"]:
    around += ["a %s b" % t, "a%sb" % t, "  %s  " % t, "x %s" % t, "%s y" % t, "_%s_" % t,
               "1%s2" % t, "(%s)" % t, "%s%s" % (t, t), "w \t%s\n z" % t, "%s" % t, "end %s" % t]
docs = docs + non_nfc + around
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
         r"\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=800, special_tokens=["<|endoftext|>"],
                                  show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs[:400] + non_nfc, trainer)
    return tok


def sentencepiece():
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Prepend("\u2581"),
                                           normalizers.Replace(" ", "\u2581")])
    specials = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    tok.train_from_iterator(docs[:400] + non_nfc, trainers.BpeTrainer(
        vocab_size=700, special_tokens=specials, show_progress=False, limit_alphabet=80))
    return tok


def write_tokens(path, ids):   # (x86: the host's byte order is the file's little-endian)
    with open(path, "wb") as f:
        array.array("i", [20240520, 1, len(ids)] + [0] * 253).tofile(f)
        array.array("H", ids).tofile(f)


open(out + "/docs.jsonl", "w", encoding="utf-8").write(
    "".join(json.dumps({"text": d}) + "\n" for d in docs))
bl, sp = byte_level(), sentencepiece()
cases = [("nfc_bytelevel", bl, "<|endoftext|>"), ("nfc_sentencepiece", sp, "<s>")]
flag_sets = {"plain": {}, "lstrip": {"lstrip": True}, "rstrip": {"rstrip": True},
             "lrstrip": {"lstrip": True, "rstrip": True}, "single_word": {"single_word": True},
             "normalized": {"normalized": True}, "raw": {"normalized": False},
             "special": {"special": True},
             "raw_lrstrip": {"normalized": False, "lstrip": True, "rstrip": True},
             "raw_single_word": {"normalized": False, "single_word": True},
             "all": {"lstrip": True, "rstrip": True, "single_word": True, "normalized": True}}
for base_name, base, sep in list(cases):
    for flags_name, flags in flag_sets.items():
        tok = Tokenizer.from_str(base.to_str())
        tok.add_tokens([AddedToken(c, **flags) for c in ("<m>", "[X]", "cafe\u0301")])
        cases.append(("%s_%s" % (base_name, flags_name), tok, sep))
for name, tok, sep in cases:
    tok.save("%s/%s.json" % (out, name))
    sep_id = tok.token_to_id(sep)
    ids = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        ids.append(sep_id)
        ids.extend(enc.ids)
    write_tokens("%s/%s.expected.bin" % (out, name), ids)
    print(name, sep)
