"""The APAR zoo's training sequences, on a hand-made list: the 1 + k decomposition of the
released training data and the inline form, with their loss masks."""

from __future__ import annotations

import random
from dataclasses import replace

from real_backend.zoo.apar_data import (
    WINDOW_CONTEXT,
    DocList,
    Example,
    examples,
    inline_example,
    inline_rows,
    windows,
    writes_detail_inline,
)
from real_backend.zoo.specs import SPECS

FORK, CHILD, EOS = -1, -2, -3
DOC = DocList("functions of `json`", (("dumps", "Serialize."), ("loads", "Parse.")), False)


def encode(text: str) -> list[int]:
    return [ord(c) for c in text]


def decode(ids: tuple[int, ...]) -> str:
    names = {FORK: "[Fork]", CHILD: "[Child]", EOS: "<eos>"}
    return "".join(names.get(i, chr(i) if i >= 0 else "?") for i in ids)


def trained(ex) -> str:
    return decode(tuple(i for i, loss in zip(ex.ids, ex.loss, strict=True) if loss))


def test_main_sequence_is_the_skeleton_with_fork_tokens() -> None:
    main = examples(DOC, encode, FORK, CHILD, EOS)[0]
    assert decode(main.ids) == DOC.prompt + "1. `dumps`:[Fork]\n2. `loads`:[Fork]<eos>"
    assert trained(main) == "1. `dumps`:[Fork]\n2. `loads`:[Fork]<eos>"


def test_each_child_sees_the_skeleton_up_to_its_own_fork_only() -> None:
    _, first, second = examples(DOC, encode, FORK, CHILD, EOS)
    assert decode(first.ids) == DOC.prompt + "1. `dumps`:[Fork][Child] Serialize.<eos>"
    assert decode(second.ids) == (
        DOC.prompt + "1. `dumps`:[Fork]\n2. `loads`:[Fork][Child] Parse.<eos>"
    )
    assert trained(first) == " Serialize.<eos>" and trained(second) == " Parse.<eos>"


def test_inline_form_writes_every_detail_after_its_name() -> None:
    ex = inline_example(DOC, encode, EOS)
    answer = "1. `dumps`: Serialize.\n2. `loads`: Parse.<eos>"
    assert decode(ex.ids) == DOC.prompt + answer
    assert trained(ex) == answer


def test_an_inline_answer_is_told_from_a_bare_skeleton() -> None:
    assert writes_detail_inline("1. `dumps`: Serialize obj.\n2. `loads`:")
    assert not writes_detail_inline("1. `dumps`:\n2. `loads`: Parse.")
    assert not writes_detail_inline("import json")


def test_inline_rows_without_windows_are_a_seeded_share_of_whole_lists_that_fit_a_row() -> None:
    short = [DocList(f"functions of `m{i}`", (("a", "A."), ("b", "B.")), False) for i in range(16)]
    wide = (("a", "A" * 80), ("b", "B."))
    long = [DocList(f"functions of `n{i}`", wide, False) for i in range(16)]
    spec = replace(SPECS["apar-tiny"], seq_len=60, inline_share=0.25, inline_windows=False)
    rows = inline_rows(short + long, encode, EOS, spec)
    assert len(rows) == 8 and len(set(rows)) == 8  # a quarter of 32, drawn from the 16 that fit
    assert all(len(ex.ids) <= 61 and ex.ids[-1] == EOS for ex in rows)
    assert rows == inline_rows(short + long, encode, EOS, spec)
    assert rows != inline_rows(short + long, encode, EOS, replace(spec, seed=spec.seed + 1))
    assert len(inline_rows(short[:3] + long, encode, EOS, spec)) == 3  # all that fit


def test_inline_rows_draw_long_lists_too_cut_into_windows() -> None:
    short = [DocList(f"functions of `m{i}`", (("a", "A."), ("b", "B.")), False) for i in range(16)]
    wide = (("a", "A" * 80), ("b", "B."))
    long = [DocList(f"functions of `n{i}`", wide, False) for i in range(16)]
    spec = replace(SPECS["apar-tiny"], seq_len=60, inline_share=0.5)
    rows = inline_rows(short + long, encode, EOS, spec)
    assert all(len(ex.ids) <= 61 for ex in rows)
    ends = [ex for ex in rows if ex.ids[-1] == EOS]
    assert len(ends) == 16  # half of the 32 lists, each written to its EOS
    assert len(rows) > len(ends)  # the long ones drawn, in more than one window
    prompt = tuple(encode("Describe"))
    continued = [ex for ex in rows if ex.ids[: len(prompt)] != prompt]
    assert continued and not any(any(ex.loss[:WINDOW_CONTEXT]) for ex in continued)
    assert rows == inline_rows(short + long, encode, EOS, spec)
    assert rows != inline_rows(short + long, encode, EOS, replace(spec, seed=spec.seed + 1))


def test_windows_train_every_target_once_with_context_before_it() -> None:
    details = [" ".join(f"w{i}.{j}" for j in range(4 * i + 4)) for i in range(6)]  # unique
    doc = DocList("functions of `w`", tuple((f"f{i}", d) for i, d in enumerate(details)), False)
    ex = inline_example(doc, encode, EOS)
    length, context = 50, 12
    parts = windows(ex, length, context)
    assert len(ex.ids) > 3 * length and all(len(w.ids) <= length for w in parts)
    assert parts[0].ids == ex.ids[:length] and parts[-1].ids[-1] == EOS
    # Every window is a slice of the example; their loss positions partition the example's.
    starts = [_start(ex.ids, w.ids) for w in parts]
    trained = sorted(
        s + i for s, w in zip(starts, parts, strict=True) for i, f in enumerate(w.loss) if f
    )
    assert trained == [i for i, f in enumerate(ex.loss) if f]
    for w in parts[1:]:
        assert not any(w.loss[:context])  # at least `context` tokens before any target


def test_windows_keep_an_examples_own_loss_mask() -> None:
    """A target without loss in the example (a child's context) gets none in any window."""
    flags = random.Random(0).choices([True, False], k=200)
    ex = Example(tuple(range(200)), (False, *flags[1:]))
    parts = windows(ex, 40, 10)
    trained = sorted(w.ids[i] for w in parts for i, f in enumerate(w.loss) if f)
    assert trained == [i for i, f in enumerate(ex.loss) if f]


def _start(whole: tuple[int, ...], part: tuple[int, ...]) -> int:
    return next(s for s in range(len(whole)) if whole[s : s + len(part)] == part)
