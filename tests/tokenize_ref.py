#!/usr/bin/env python3
# tokenize_ref.py: the reference side of tests/sh/tokenize_hf.sh: trains tokenizers with the
# `tokenizers` library on part of the corpus (byte-level with the GPT-2, LLaMA-3 and Qwen2
# pre-tokenizers; SentencePiece-style BPE with byte fallback, LLaMA-2's normalizers and Metaspace),
# writes each tokenizer.json, the documents as JSON lines, and the library's ids as an llm.c token
# file (the separator before every document), and one long document alone, for `boost tokenize`
# to reproduce byte for byte.
# Usage: python3 tests/tokenize_ref.py CORPUS OUTDIR    (exit 3: the library is not installed)
import json, struct, sys

try:
    from tokenizers import Tokenizer, Regex, models, normalizers, pre_tokenizers, decoders, trainers
except ImportError:
    sys.exit(3)

corpus, out = sys.argv[1], sys.argv[2]
text = open(corpus, encoding="utf-8", errors="replace").read()
docs = [d for d in text.split("\n\n") if d.strip()][:2500]
big = text[:300000]   # one long document: `boost tokenize` cuts it into pieces for its threads
# text the corpus lacks: scripts, digits, contractions, every kind of white space, specials
tricky = [
    "Hello world", "  leading spaces", "trailing   ", "tabs\tand\nnewlines\r\n\r\nx",
    "It's I'M we'LL they'Re 'S 'd 've", "numbers 1234567 12 3.14159 1,000,000", "naïve café Ünïcödé",
    "中文字符测试，标点。", "日本語のテキストです", "emoji 😀🎉 mixed 👍🏽", "Ελληνικά κείμενα", "русский текст",
    "العربية ١٢٣ ٤٥٦", "   \n\n   \t  end", "a\u00a0b\u2003c\u3000d", "x\u0085y\u2028z", "Ⅻ ½ ² ³",
    "x <|endoftext|> y", "<|endoftext|>", "'", "a'", "don't'sx", "\r\r\n\n", " ", "\n", "!!!...???",
    "  $$$ 100% ##", "word\n word \n\tword", "ǅemal ǈ ǋ", "tab\t\t\tx", "a  b   c    d",
    "ünïcode at the end é", "z" * 300, "ab" * 200 + " " + "1" * 50,
]
docs = docs + tricky
train_text = docs[:1000]

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
SPECIAL = ["<|endoftext|>"]


def byte_level(pre, vocab):
    tok = Tokenizer(models.BPE())
    if pre == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3 if pre == "llama3" else QWEN2), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train_text, trainer)
    return tok


def sentencepiece(style, vocab):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if style == "llama2":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
    specials = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, show_progress=False,
                                  limit_alphabet=80)
    tok.train_from_iterator(train_text, trainer)
    return tok


def write_tokens(path, ids):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)))
        f.write(struct.pack("<%dH" % len(ids), *ids))


with open(out + "/docs.jsonl", "w", encoding="utf-8") as f:
    for d in docs:
        f.write(json.dumps({"text": d}) + "\n")
cases = [("gpt2", byte_level("gpt2", 1200), "<|endoftext|>"),
         ("llama3", byte_level("llama3", 1200), "<|endoftext|>"),
         ("qwen2", byte_level("qwen2", 1200), "<|endoftext|>"),
         ("llama2", sentencepiece("llama2", 900), "<s>"),
         ("metaspace", sentencepiece("metaspace", 900), "<s>")]
llama3 = json.loads(cases[1][1].to_str())   # LLaMA-3 ships with ignore_merges: whole words first
llama3["model"]["ignore_merges"] = True
cases.append(("llama3im", Tokenizer.from_str(json.dumps(llama3)), "<|endoftext|>"))
meta = json.loads(cases[4][1].to_str())    # Mistral's later files: Metaspace, first only, no split
meta["pre_tokenizer"].update(prepend_scheme="first", split=False)
cases.append(("metafirst", Tokenizer.from_str(json.dumps(meta)), "<s>"))
for name, tok, sep in cases:
    tok.save("%s/%s.json" % (out, name))
    sep_id = tok.token_to_id(sep)
    ids = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        ids.append(sep_id)
        ids.extend(enc.ids)
    write_tokens("%s/%s.expected.bin" % (out, name), ids)
    print(name, sep, len(ids))
    if name in ("gpt2", "llama3", "llama2"):
        write_tokens("%s/%s.big.expected.bin" % (out, name), tok.encode(big, add_special_tokens=False).ids)
with open(out + "/big.txt", "w", encoding="utf-8") as f:
    f.write(big)
