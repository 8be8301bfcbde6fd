"""attnc.datasets.translation_task (the synthetic language pair of the
Bahdanau length curves): every sentence parsed by a regular expression over
its parts of speech and translated by a reference written here, the splits,
batches and scores. Python and NumPy only, a few seconds."""

import re

import numpy as np
import pytest

from attnc.datasets import TranslationTask, translation_split, translation_task
from attnc.datasets import translation as tr

TAGS = {**{w: tag for tag, words in zip("NAVDPC", tr._WORDS.values()) for w in words.split()}, ".": "."}
NP = r"(DA{0,2}N)"
CLAUSE = rf"{NP}V{NP}(?:P{NP})?"
SENTENCE = re.compile(rf"^{CLAUSE}(?:C{CLAUSE})*\.$")


def reference(source):
    """The target by the grammar: per clause S' O' [NP' P'] V', a noun phrase as
    noun, adjectives backwards, determiner; conjunctions and "." in place."""
    words = source.split()
    tags = "".join(TAGS[w] for w in words)
    assert SENTENCE.match(tags), (source, tags)
    out, start = [], 0
    for m in re.finditer(rf"({CLAUSE})(C|\.)", tags):
        spans = [m.span(g) for g in (2, 3, 4)]
        nps = [words[a:b] for a, b in spans if a >= 0]
        verb = words[spans[0][1]]
        for phrase in nps:
            out += [phrase[-1], *phrase[1:-1][::-1], phrase[0]]
        if spans[2][0] >= 0:
            out.append(words[spans[2][0] - 1])  # the preposition, after its noun phrase
        out += [verb, words[m.end() - 1]]
        start = m.end()
    assert start == len(words)
    return " ".join(tr.LEXICON.get(w, w) for w in out)


def test_every_sentence_follows_the_grammar_and_its_translation():
    task = translation_task(400, seed=3)
    for s, t in zip(task.sources, task.targets):
        assert t == reference(s)
    assert ((task.lengths >= 5) & (task.lengths <= 60)).all()
    np.testing.assert_array_equal(task.lengths, [len(t.split()) for t in task.targets])
    assert task.targets[0] != task.sources[0]


def test_a_sentence_by_hand():
    lex = tr.LEXICON
    task = TranslationTask(["the big red dog sees a bird near this house and a cat likes the fish ."], "train")
    want = "dog red big the bird a house this near sees and cat a fish the likes ."
    assert task.targets[0] == " ".join(lex.get(w, w) for w in want.split())


def test_the_languages_share_no_word_and_every_word_moves_somewhere():
    assert len(set(tr.LEXICON.values())) == len(tr.LEXICON)  # a bijection
    assert not set(tr.SOURCE_VOCAB.tokens[3:]) & set(tr.TARGET_VOCAB.tokens[3:]) - {"."}
    task = translation_task(200, seed=4, min_len=30)
    inverse = {v: k for k, v in tr.LEXICON.items()}
    moved = []
    for s, t in zip(task.sources, task.targets):
        src, back = s.split(), [inverse.get(w, w) for w in t.split()]
        moved.append(np.mean([a != b for a, b in zip(src, back)]))
    assert np.mean(moved) > 0.7  # most positions hold another word in the target


def test_lengths_cover_the_range_and_splits_are_disjoint():
    train = translation_task(3000, seed=1)
    test = translation_task(1000, seed=2, split="test")
    for lo in range(10, 60, 10):
        assert ((train.lengths >= lo) & (train.lengths < lo + 10)).mean() > 0.1
    assert all(translation_split(s) == "train" for s in train.sources)
    assert all(translation_split(s) == "test" for s in test.sources)
    assert not set(train.sources) & set(test.sources)
    assert translation_task(50, seed=1).sources == train.sources[:50]
    short = translation_task(100, seed=1, min_len=8, max_len=12)
    assert ((short.lengths >= 8) & (short.lengths <= 12)).all()


def test_batches_and_scores():
    task = translation_task(6, seed=5)
    b = task.batch([2, 0])
    assert b.src.shape == (2, task.lengths[[2, 0]].max())
    assert task.src_vocab.decode(b.src[0]) == task.sources[2]
    assert (b.tgt_in[:, 0] == task.bos).all()
    assert task.tgt_vocab.decode(b.tgt_out[1]) == task.targets[0]
    assert b.tgt_out[0, task.lengths[2]] == task.eos
    assert sum(len(x.src) for x in task.batches(4)) == 6
    ids = task.tgt_vocab.pad_batch(task.targets, eos=True).ids
    assert task.exact_match(ids).all() and (task.token_accuracy(ids) == 1).all()
    wrong = ids.copy()
    wrong[0, 0] = task.tgt_vocab.first_id + (ids[0, 0] - task.tgt_vocab.first_id + 1) % 10
    assert task.exact_match(wrong).tolist() == [False] + [True] * 5
    assert task.token_accuracy(wrong)[0] == pytest.approx(1 - 1 / (task.lengths[0] + 1))
    assert task.token_accuracy(ids[:, :3])[0] == pytest.approx(3 / (task.lengths[0] + 1))  # cut short
    by = task.by_length(np.arange(6.0), [0, 20, 61])
    for key, value in by.items():
        lo, hi = map(int, key.split("-"))
        inside = (task.lengths >= lo) & (task.lengths <= hi)
        assert value == np.arange(6.0)[inside].mean()
    with pytest.raises(ValueError, match="edges"):
        task.by_length(np.zeros(6), [5])
    with pytest.raises(ValueError, match="values"):
        task.by_length(np.zeros(5), [0, 9])
    with pytest.raises(ValueError, match="predictions"):
        task.token_accuracy(ids[:2])
    assert len(translation_task(0)) == 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n=-1), "n"),
        (dict(max_len=5), "max_len"),
        (dict(min_len=30, max_len=20), "max_len"),
        (dict(split="dev"), "split"),
    ],
)
def test_refusals(kwargs, match):
    with pytest.raises(ValueError, match=match):
        translation_task(**(dict(n=2) | kwargs))
