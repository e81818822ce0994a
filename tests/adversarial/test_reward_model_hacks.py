"""Gaming a learned reward model through PPO's span rewards.

Measured on the demo: PPO on the tagger reward model reached a held-out fact error of 0.04 by step 8, then learnt to
repeat clauses it got right ("..., all mice colored brown, all mice colored brown, all mice colored brown") because
the tagger labels every correct value good, wherever it stands: the summed reward climbed from 8 to 20 while the
task error rose back to 0.17 and the KL to 50 nats. A good span's text now pays once per response."""

from __future__ import annotations

from t2g_core.config import AlignConfig
from t2g_core.ppo.scoring import label_responses
from t2g_core.spans import ParsedFeedback
from tests.core._tokenizers import byte_level_bpe

HONEST = "A person named Lena lives in Hanoi with 7 pets, all mice colored brown."
FARMING = "A person named Lena lives in Hanoi with 7 pets, all mice colored brown, all mice colored brown, all mice"


def _naive_reward_model(response: str) -> ParsedFeedback:
    """Labels every value it recognises good, wherever it stands (what the tagger learnt from the demo data)."""
    values = ("Lena", "Hanoi", "7", "mice", "brown")
    located, start = [], 0
    for word in response.replace(",", " ").replace(".", " ").split():
        start = response.index(word, start)
        if word in values:
            located.append((start, start + len(word), "positive"))
        start += len(word)
    return ParsedFeedback("", good_spans=[response[s:e] for s, e, _ in located], located=tuple(located))


def _reward(response: str, cfg: AlignConfig) -> float:
    tok = byte_level_bpe()
    enc = tok(response, add_special_tokens=False, return_offsets_mapping=True)
    [scored] = label_responses([(response, enc["offset_mapping"])], [_naive_reward_model(response)], cfg)
    return sum(scored.labels)


def test_repeating_what_was_right_earns_nothing_more():
    once, each = AlignConfig(), AlignConfig(repeated_good_spans="each")
    assert _reward(FARMING, once) == _reward(HONEST, once) > 0
    assert _reward(FARMING, each) > _reward(HONEST, each)  # the hack, when repeats are paid


def test_the_first_mention_keeps_its_reward_and_poor_spans_are_never_dropped():
    response = "Lena lives in Hanoi. Lena lives in Paris."
    fb = ParsedFeedback(
        "", located=((0, 4, "positive"), (14, 19, "positive"), (21, 25, "positive"), (35, 40, "negative"))
    )
    tok = byte_level_bpe()
    enc = tok(response, add_special_tokens=False, return_offsets_mapping=True)
    [scored] = label_responses([(response, enc["offset_mapping"])], [fb], AlignConfig())

    def labels_in(start: int, end: int) -> set[float]:
        return {v for (s, e), v in zip(enc["offset_mapping"], scored.labels, strict=True) if s < end and start < e}

    assert labels_in(0, 4) == {1.0} and labels_in(14, 19) == {1.0}  # the first "Lena", "Hanoi"
    assert labels_in(21, 25) == {0.0}  # the second "Lena": nothing
    assert labels_in(35, 40) == {-1.0}  # "Paris" stays poor
