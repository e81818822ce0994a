"""Reward-source devices: a critic made worse on purpose, to measure what PPO does with a noisy annotator."""

from __future__ import annotations

import dataclasses
import hashlib
import random

FLIPPED = {"positive": "negative", "negative": "positive"}


class NoisyCritic:
    """A reward source that flips each span's label (good <-> poor) with probability ``flip`` and reports no
    omissions: a reward model or annotator that is wrong about a share of its spans and blind to what is missing.

    The flips are drawn from (``seed``, row id, response), so one response gets the same labels every time it is
    scored and a run is reproducible; a failed critique stays as it is."""

    def __init__(self, source, flip: float, seed: int):
        if not 0.0 <= flip <= 1.0:
            raise ValueError(f"flip must be a probability, got {flip}")
        self.source, self.flip, self.seed = source, flip, seed

    def critique_batch(self, rows: list[dict]):
        return [self.noisy(row, fb) for row, fb in zip(rows, self.source.critique_batch(rows), strict=True)]

    def noisy(self, row: dict, fb):
        return add_noise(fb, self.flip, f"{self.seed}\0{row['id']}\0{row['response']}")


def add_noise(fb, flip: float, key: str):
    """``fb`` with each span's label flipped (good <-> poor) with probability ``flip`` and no omissions, the flips
    drawn from ``key`` (the same key, the same flips); a failed critique as it is."""
    if not fb.ok:
        return fb
    rng = random.Random(hashlib.sha256(key.encode()).digest())
    good, poor = [], []
    for text in fb.good_spans:
        (poor if rng.random() < flip else good).append(text)
    for text in fb.poor_spans:
        (good if rng.random() < flip else poor).append(text)
    located = tuple((a, b, FLIPPED[lab] if rng.random() < flip else lab) for a, b, lab in fb.located)
    return dataclasses.replace(fb, good_spans=good, poor_spans=poor, located=located, missing=(), missing_at=())
