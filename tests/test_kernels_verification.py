"""Greedy verification: the reference follows its contract; the Triton kernel equals it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernel_helpers import kernel_device  # noqa: E402

DEVICE = kernel_device()  # before triton is imported: the interpreter needs setting first

from kernels.verification import chain_parents  # noqa: E402
from kernels.verification import greedy_verify as reference  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def logits_choosing(choices: list[list[int]], vocab: int = 8) -> torch.Tensor:
    """(B, T, V) logits whose argmax at [b, j] is choices[b][j]."""
    logits = torch.zeros(len(choices), len(choices[0]), vocab)
    for b, row in enumerate(choices):
        for j, token in enumerate(row):
            logits[b, j, token] = 1.0
    return logits


def run_reference(choices, drafts, draft_lens, parents=None):
    out = reference(
        logits_choosing(choices),
        torch.tensor(drafts),
        torch.tensor(draft_lens),
        None if parents is None else torch.tensor(parents),
    )
    return [t.tolist() for t in out]


def test_reference_chain_takes_the_matching_prefix_and_the_next_argmax():
    # argmax after root/d1/d2/d3 = 5, 6, 1, 2; drafts 5, 6, 7: the third mismatches.
    lens, bonus, path = run_reference([[5, 6, 1, 2]], [[5, 6, 7]], [3])
    assert (lens, bonus, path) == ([2], [1], [[0, 1, 2, -1]])
    # All accepted: the bonus is the argmax after the last draft; draft_lens cuts padding.
    assert run_reference([[5, 6, 1, 2]], [[5, 6, 1]], [3]) == [[3], [2], [[0, 1, 2, 3]]]
    assert run_reference([[5, 6, 1, 2]], [[5, 6, 1]], [1]) == [[1], [6], [[0, 1, -1, -1]]]
    assert run_reference([[5, 6, 1, 2]], [[4, 6, 1]], [3]) == [[0], [5], [[0, -1, -1, -1]]]


def test_reference_tree_takes_the_deepest_path_then_the_lowest_sibling():
    # Root's argmax is 3; nodes 1 and 2 both carry 3 (duplicate siblings). Node 1's only child
    # (3) fails, node 2's child (4) matches: the deeper path goes through the higher sibling.
    parents = [[-1, 0, 0, 1, 2]]
    choices = [[3, 7, 5, 0, 0]]
    drafts = [[3, 3, 6, 5]]
    assert run_reference(choices, drafts, [4], parents) == [[2], [0], [[0, 2, 4, -1, -1]]]
    # Both children match: equally deep, the path through the lower sibling wins.
    choices = [[3, 6, 5, 1, 2]]
    assert run_reference(choices, drafts, [4], parents) == [[2], [1], [[0, 1, 3, -1, -1]]]


def test_reference_refuses_a_parent_that_is_not_earlier():
    with pytest.raises(ValueError, match="parent of node 2"):
        run_reference([[1, 1, 1]], [[1, 1]], [2], [[-1, 0, 2]])


def random_case(gen: torch.Generator, batch: int, n_nodes: int, vocab: int, tree: bool):
    """Random logits (with ties), parents and drafts that mostly match their parent's argmax."""
    logits = torch.randint(0, 4, (batch, n_nodes, vocab), generator=gen).float()  # many ties
    if torch.rand(1, generator=gen) < 0.5:  # or few
        logits += torch.randn(batch, n_nodes, vocab, generator=gen)
    argmax = logits.argmax(-1)
    parents = torch.full((batch, n_nodes), -1, dtype=torch.long)
    for j in range(1, n_nodes):
        parents[:, j] = torch.randint(0, j, (batch,), generator=gen) if tree else j - 1
    drafts = torch.randint(0, vocab, (batch, n_nodes - 1), generator=gen)
    match = torch.rand(batch, n_nodes - 1, generator=gen) < 0.75
    parent_choice = torch.gather(argmax, 1, parents[:, 1:].clamp(min=0))
    drafts = torch.where(match, parent_choice, drafts)
    draft_lens = torch.randint(0, n_nodes, (batch,), generator=gen)
    draft_lens[0] = n_nodes - 1
    return logits, drafts, draft_lens, parents if tree else None


def test_random_chains_and_trees_follow_the_contract_under_the_reference():
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        logits, drafts, draft_lens, parents = random_case(gen, 4, 7, 5, tree=False)
        lens, bonus, path = reference(logits, drafts, draft_lens, parents)
        argmax = logits.argmax(-1)
        for b in range(4):
            n = int(lens[b])
            assert torch.equal(drafts[b, :n], argmax[b, :n])  # a matching prefix
            assert n == draft_lens[b] or drafts[b, n] != argmax[b, n]  # ... the longest
            assert bonus[b] == argmax[b, n]
            assert path[b].tolist() == list(range(n + 1)) + [-1] * (6 - n)


def test_reference_chains_equal_the_tree_rule_over_chain_parents():
    """The batched chain rule (parents None) against the per-sequence tree walk."""
    gen = torch.Generator().manual_seed(1)
    for n_nodes in (1, 2, 5, 9):
        for _ in range(30):
            logits, drafts, draft_lens, _ = random_case(gen, 6, n_nodes, 5, tree=False)
            chains = reference(logits, drafts, draft_lens)
            walked = reference(logits, drafts, draft_lens, chain_parents(6, n_nodes))
            for got, want in zip(chains, walked, strict=True):
                assert torch.equal(got, want)


def test_reference_refuses_a_draft_length_beyond_the_nodes_chain_or_tree():
    logits, drafts = logits_choosing([[1, 1, 1]]), torch.tensor([[1, 1]])
    for parents in (None, chain_parents(1, 3)):
        with pytest.raises(ValueError, match=r"draft_lens\[0\] must be in \[0, 2\], got 3"):
            reference(logits, drafts, torch.tensor([3]), parents)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tree", [False, True])
@pytest.mark.parametrize("n_nodes, vocab", [(1, 40), (9, 1500), (20, 300)])
def test_triton_equals_reference(dtype, tree, n_nodes, vocab):
    pytest.importorskip("triton")
    from kernels.triton_verification import greedy_verify

    gen = torch.Generator().manual_seed(n_nodes + vocab + tree)
    for _ in range(2):
        logits, drafts, draft_lens, parents = random_case(gen, 5, n_nodes, vocab, tree)
        logits = logits.to(dtype)  # exact: small integers plus noise survive or tie alike
        expected = reference(logits, drafts, draft_lens, parents)
        args = (logits.to(DEVICE), drafts.to(DEVICE), draft_lens.to(DEVICE))
        got = greedy_verify(*args, None if parents is None else parents.to(DEVICE))
        for g, e in zip(got, expected, strict=True):
            assert torch.equal(g.cpu(), e)


def test_triton_breaks_sibling_ties_like_the_reference():
    pytest.importorskip("triton")
    from kernels.triton_verification import greedy_verify

    parents = torch.tensor([[-1, 0, 0, 1, 2], [-1, 0, 0, 1, 2]])
    logits = logits_choosing([[3, 7, 5, 0, 0], [3, 6, 5, 1, 2]])
    drafts = torch.tensor([[3, 3, 6, 5], [3, 3, 6, 5]])
    lens = torch.tensor([4, 4])
    expected = reference(logits, drafts, lens, parents)
    got = greedy_verify(logits.to(DEVICE), drafts.to(DEVICE), lens.to(DEVICE), parents.to(DEVICE))
    for g, e in zip(got, expected, strict=True):
        assert torch.equal(g.cpu(), e)


def test_triton_takes_trees_up_to_its_limit_and_refuses_larger():
    pytest.importorskip("triton")
    from kernels.triton_verification import MAX_TREE_NODES, greedy_verify

    T = MAX_TREE_NODES
    gen = torch.Generator().manual_seed(T)
    logits, drafts, draft_lens, parents = random_case(gen, 2, T, 50, tree=True)
    logits[1] = torch.randn(T, 50, generator=gen)  # sequence 1: a fully matching path of T - 1
    parents[1] = torch.arange(-1, T - 1)
    drafts[1] = logits[1, :-1].argmax(-1)
    draft_lens[1] = T - 1
    expected = reference(logits, drafts, draft_lens, parents)
    assert expected[0][1] == T - 1  # the ancestor closure must reach 127 levels up
    got = greedy_verify(*(t.to(DEVICE) for t in (logits, drafts, draft_lens, parents)))
    for g, e in zip(got, expected, strict=True):
        assert torch.equal(g.cpu(), e)
    bigger = random_case(gen, 1, T + 1, 50, tree=True)
    with pytest.raises(ValueError, match=f"at most {T} nodes"):
        greedy_verify(*(t.to(DEVICE) for t in bigger))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("tree", [False, True])
def test_triton_on_cuda_at_scale(tree):
    from kernels.triton_verification import greedy_verify

    gen = torch.Generator().manual_seed(0)
    for n_nodes in (8, 64):
        logits, drafts, draft_lens, parents = random_case(gen, 64, n_nodes, 32000, tree)
        expected = reference(logits, drafts, draft_lens, parents)
        cuda = (t.cuda() if t is not None else None for t in (logits, drafts, draft_lens, parents))
        got = greedy_verify(*cuda)
        for g, e in zip(got, expected, strict=True):
            assert torch.equal(g.cpu(), e)


def test_reference_refuses_drafts_of_another_width_as_the_kernel_does():
    """The decoders pass exactly (B, T - 1) drafted tokens: a padded width that the reference
    accepted made the Triton kernel refuse speculative steps without a drafted token."""
    with pytest.raises(ValueError, match=r"draft_tokens must be \(1, 0\)"):
        run_reference([[1]], [[0]], [0])
    assert run_reference([[1]], [[]], [0]) == [[0], [1], [[0]]]
