"""The shortcut for plain words (names, uids, versions) gives what every text rule gives them."""

import random
from collections import Counter

import pytest

from diag.collect.redact import _PLAIN_WORD, _cleaned_string, redact_text

# tokens the formats and detectors know, written with the plain word alphabet only
TOKENS = [
    "hf_plantPlainWord0080abcdefghijkl",
    "sk-plantPlainWord0081abcdefghijklmno",
    "ghp_" + "a1B2" * 9,
    "github_pat_" + "x9Y8_" * 8,
    "xoxb-123456789012-plantPlain0082",
    "AKIAPLANTPLAIN00831X",
    "ASIAPLANTPLAIN0084ZZ",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwbGFudCJ9.c2lnbmF0dXJlcGxhbnQ",
    "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "AIza" + "SyD-plantPlainWord0085abcdefghijklm",
    "SK" + "0123456789abcdef" * 2,
    "npm_" + "a" * 36,
]
WORDS = [
    "vllm-0",
    "llama-70b-7f8d9c6b5d-8q7hc",
    "a1b2c3d4-0000-4e5f-8a9b-0123456789ab",
    "12345",
    "v0.10.1",
    "",
    "-",
    "_x.y",
]


def _words(rng: random.Random) -> list[str]:
    alphabet = "abcxyzABCXYZ0123456789._-"
    made = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(3000)]
    glued = [rng.choice(WORDS) + rng.choice(["", "-", "."]) + rng.choice(TOKENS) for _ in range(300)]
    return made + glued + TOKENS + WORDS


def test_plain_words_come_out_as_every_text_rule_leaves_them() -> None:
    redacted = 0
    for word in _words(random.Random(20261204)):
        assert _PLAIN_WORD.fullmatch(word)
        hits: Counter[str] = Counter()
        expected = redact_text(word, hits)
        _cleaned_string.cache_clear()
        assert _cleaned_string(word) == (expected, tuple(hits.items())), word
        redacted += expected != word
    assert redacted >= len(TOKENS)  # not vacuous: tokens in plain words are still found


@pytest.mark.parametrize("text", ["password:hunter2", "token=abc", "--api-key=x", "a b", "'k': 'v'", "http://u:p@h"])
def test_anything_else_takes_every_rule(text: str) -> None:
    assert not _PLAIN_WORD.fullmatch(text)
    hits: Counter[str] = Counter()
    assert _cleaned_string(text) == (redact_text(text, hits), tuple(hits.items()))
