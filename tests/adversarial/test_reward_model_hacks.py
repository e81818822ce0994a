"""Gaming a learned reward model through PPO's span rewards.

Measured on the demo: PPO on the tagger reward model reached a held-out fact error of 0.04 by step 8, then learnt to
repeat clauses it got right ("..., all mice colored brown, all mice colored brown, all mice colored brown") because
the tagger labels every correct value good, wherever it stands: the summed reward climbed from 8 to 20 while the
task error rose back to 0.17 and the KL to 50 nats. A good span's text now pays once per response. The next run
found the next hole: "works as a driver nurse nurse nurse ... nurse" to the token limit, which the tagger labels as
one long good span (reward 24, error 0.27, KL 99 nats): a good span's tokens now share its label, so length does not
pay either."""

from __future__ import annotations

import pytest

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

    def labels_in(start: int, end: int) -> list[float]:
        return [v for (s, e), v in zip(enc["offset_mapping"], scored.labels, strict=True) if s < end and start < e]

    assert sum(labels_in(0, 4)) == pytest.approx(1.0) and sum(labels_in(14, 19)) == pytest.approx(1.0)
    assert set(labels_in(21, 25)) == {0.0}  # the second "Lena": nothing
    assert set(labels_in(35, 40)) == {-1.0}  # "Paris" stays poor


def test_a_long_good_span_pays_what_a_short_one_does():
    tok = byte_level_bpe()
    short, long_ = "works as a nurse", "works as a nurse nurse nurse nurse nurse nurse"

    def reward(response: str, cfg: AlignConfig) -> float:
        start = response.index("nurse")
        fb = ParsedFeedback("", located=((start, len(response), "positive"),))  # the tagger's one merged run
        enc = tok(response, add_special_tokens=False, return_offsets_mapping=True)
        [scored] = label_responses([(response, enc["offset_mapping"])], [fb], cfg)
        return sum(scored.labels)

    per_span, per_token = AlignConfig(), AlignConfig(span_reward="per_token")
    assert reward(long_, per_span) == pytest.approx(reward(short, per_span)) == pytest.approx(1.0)
    assert reward(long_, per_token) > reward(short, per_token)  # the hack, when every token is paid


def test_poor_tokens_keep_their_full_penalty_inside_a_shared_good_span():
    tok = byte_level_bpe()
    response = "Lena lives in Paris"
    fb = ParsedFeedback("", located=((0, 19, "positive"), (14, 19, "negative")))
    enc = tok(response, add_special_tokens=False, return_offsets_mapping=True)
    [scored] = label_responses([(response, enc["offset_mapping"])], [fb], AlignConfig())
    poor = [v for (s, e), v in zip(enc["offset_mapping"], scored.labels, strict=True) if s >= 14]
    good = [v for (s, e), v in zip(enc["offset_mapping"], scored.labels, strict=True) if e <= 13 and s < e]
    assert poor and all(v == -1.0 for v in poor)
    assert sum(good) == pytest.approx(1.0)


def test_poor_tokens_share_the_poor_label_under_per_span():
    tok = byte_level_bpe()
    response = "Lena lives in Paris"
    fb = ParsedFeedback("", located=((0, 19, "positive"), (14, 19, "negative")))
    enc = tok(response, add_special_tokens=False, return_offsets_mapping=True)
    [scored] = label_responses([(response, enc["offset_mapping"])], [fb], AlignConfig(span_reward="per_span"))
    poor = [v for (s, e), v in zip(enc["offset_mapping"], scored.labels, strict=True) if s >= 14 and s < e]
    good = [v for (s, e), v in zip(enc["offset_mapping"], scored.labels, strict=True) if e <= 13 and s < e]
    assert sum(poor) == pytest.approx(-1.0) and len(set(poor)) == 1
    assert sum(good) == pytest.approx(1.0)
