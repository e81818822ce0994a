"""Small fast tokenizers trained locally (no hub): byte-level BPE, WordPiece and a SentencePiece-style Unigram.

Each is wrapped in ``transformers.PreTrainedTokenizerFast`` so it behaves like any ``AutoTokenizer`` result
(``return_offsets_mapping``, ``decode``, ``batch_decode``, special tokens).
"""

from __future__ import annotations

from collections.abc import Iterable

CORPUS = [
    "The summary says Berlin but the post says Paris.",
    "Alice moved to Paris in 2019 and works as a nurse at the city hospital.",
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    if i % 2 == 0:\n        print(i)\n",
    '“Curly quotes” and ‘single ones’ aren\'t the same as "straight" quotes.',
    "Emoji 😀 🎉 👍🏽 and CJK 中文字符 日本語のテキスト 한국어 mixed in.",
    "**Bold** and _italic_ markdown with `code` spans.",
    "Numbers 3.14, 42, 1e-5 and symbols: $ € £ ¥ % & @ #.",
    "Ünïcödé àccents, naïve café, Straße, İstanbul, ΣΊΣΥΦΟΣ.",
] * 20


def _wrap(tok, **special) -> object:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tok, **special)


def byte_level_bpe(corpus: Iterable[str] = CORPUS, vocab_size: int = 400):
    """GPT-2 style: byte-level pre-tokenizer, BPE, byte-level decoder (multi-byte chars split across tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(list(corpus), trainer)
    return _wrap(tok, eos_token="<|endoftext|>", pad_token="<pad>")


def wordpiece(corpus: Iterable[str] = CORPUS, vocab_size: int = 600):
    """BERT style: whitespace/punctuation pre-tokenizer, WordPiece with ``##`` continuations, [UNK] for the rest."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]"])
    tok.train_from_iterator(list(corpus), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))],
    )
    return _wrap(tok, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]")


def unigram_metaspace(corpus: Iterable[str] = CORPUS, vocab_size: int = 500):
    """SentencePiece style: Metaspace (▁) pre-tokenizer and decoder, Unigram model with byte fallback off."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "</s>"], unk_token="<unk>")
    tok.train_from_iterator(list(corpus), trainer)
    return _wrap(tok, unk_token="<unk>", eos_token="</s>")
