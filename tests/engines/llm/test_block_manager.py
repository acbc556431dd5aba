"""BlockManager and Scheduler invariants, without a model."""

from __future__ import annotations

from ayo.engines.llm.block_manager import BlockManager
from ayo.engines.llm.scheduler import Scheduler
from ayo.engines.llm.sequence import Sequence


def seq(i: int, tokens: list[int]) -> Sequence:
    return Sequence(i, tokens)


def computed(bm: BlockManager, s: Sequence, n: int | None = None) -> None:
    """Pretend the model computed the sequence's tokens (up to ``n``)."""
    n = s.num_tokens if n is None else n
    assert bm.allocate(s, n)
    s.num_computed_tokens = n
    bm.commit(s)


def test_allocate_and_free_ref_counts():
    bm = BlockManager(num_blocks=8, block_size=4)
    a = seq(0, list(range(10)))
    assert bm.allocate(a, 10) and len(a.block_table) == 3
    assert bm.allocate(a, 12) and len(a.block_table) == 3  # still fits
    assert bm.allocate(a, 13) and len(a.block_table) == 4
    assert not bm.allocate(seq(1, []), 17)  # 5 blocks > 4 free: nothing taken
    assert bm.num_free == 4
    bm.free(a)
    assert bm.num_free == 8 and all(b.ref_count == 0 for b in bm.blocks)


def test_chained_hash_prefix_sharing():
    bm = BlockManager(num_blocks=16, block_size=4)
    a = seq(0, list(range(10)))  # blocks [0..3] [4..7] [8, 9]
    computed(bm, a)
    assert sum(b.hash is not None for b in bm.blocks) == 2  # only full blocks are hashed
    b = seq(1, [*range(8), 42, 43, 44])
    assert bm.match_prefix(b) == 8
    assert b.block_table == a.block_table[:2]
    assert [bm.blocks[i].ref_count for i in a.block_table] == [2, 2, 1]
    c = seq(2, [0, 1, 2, 3, 9, 9, 9, 9, 1])  # same first block, different second
    assert bm.match_prefix(c) == 4
    d = seq(3, [7, 1, 2, 3, 4, 5, 6, 7, 1])  # same second block content, different parent
    assert bm.match_prefix(d) == 0
    st = bm.stats()
    assert st.prefix_hits == 12 and st.prefix_queries == 8 + 8 + 8


def test_match_leaves_the_last_token_to_compute():
    bm = BlockManager(num_blocks=8, block_size=4)
    computed(bm, seq(0, list(range(8))))
    again = seq(1, list(range(8)))
    assert bm.match_prefix(again) == 4  # not 8: the logits after token 7 are needed
    assert again.num_computed_tokens == 4


def test_freed_cached_blocks_are_reused_lru():
    bm = BlockManager(num_blocks=4, block_size=2)
    a = seq(0, [1, 2, 3, 4, 5])
    computed(bm, a)
    bm.free(a)
    st = bm.stats()
    assert (st.cached, st.free, st.used) == (2, 2, 0)
    b = seq(1, [1, 2, 3, 4, 6])  # takes both cached blocks back
    assert bm.match_prefix(b) == 4
    bm.free(b)
    big = seq(2, [9] * 8)  # needs all 4 blocks: evicts the cached ones, last-freed last
    order = list(bm.lru)
    assert bm.allocate(big, 8) and big.block_table == order
    assert not bm.hash_to_block and bm.stats().cached == 0
    bm.free(big)
    assert bm.match_prefix(seq(3, [1, 2, 3, 4, 5])) == 0  # evicted


def test_fork_shares_computed_full_blocks():
    bm = BlockManager(num_blocks=8, block_size=4, enable_prefix_caching=False)
    parent = seq(0, list(range(10)))
    computed(bm, parent)
    child = seq(1, [*range(10), 77])
    bm.fork(parent, child, 9)
    assert child.block_table == parent.block_table[:2] and child.num_computed_tokens == 8
    bm.free(parent)
    assert bm.num_free == 8 - 2  # the child still holds the shared blocks
    bm.free(child)
    assert bm.num_free == 8


def test_scheduler_budget_chunks_and_preemption():
    bm = BlockManager(num_blocks=6, block_size=4, enable_prefix_caching=False)
    sch = Scheduler(bm, max_num_batched_tokens=10, max_num_seqs=8)
    a, b = seq(0, list(range(12))), seq(1, list(range(12)))
    for s in (a, b):
        s.prefill_waiters.append(object())
        sch.submit(s)
    out = sch.schedule()
    assert [(c.seq.seq_id, c.start, c.num_tokens) for c in out.chunks] == [(0, 0, 10)]
    a.num_computed_tokens = 10
    out = sch.schedule()  # a's 2 remaining tokens, then b gets the rest of the budget
    assert [(c.seq.seq_id, c.start, c.num_tokens) for c in out.chunks] == [(0, 10, 2), (1, 0, 8)]
    a.num_computed_tokens, b.num_computed_tokens = 12, 8
    a.append([5])  # a decodes: 1 token, needs a 4th block; b needs its 3rd: 7 > 6 blocks
    out = sch.schedule()
    assert [s.seq_id for s in out.preempted] == [1]
    assert [(c.seq.seq_id, c.num_tokens) for c in out.chunks] == [(0, 1)]
    assert b.block_table == [] and b.num_computed_tokens == 0 and sch.waiting[0] is b


def test_a_waiting_sequence_holds_no_blocks():
    """A preempted sequence whose blocks are in the prefix cache matches them when it is next
    considered; if it still cannot be admitted it lets them go again. (Kept, they pinned the
    cache: the running sequence, short of a block, preempted itself and was then refused as one
    that could never fit, although the cache holds it twice over.)"""
    bm = BlockManager(num_blocks=6, block_size=4, enable_prefix_caching=True)
    sch = Scheduler(bm, max_num_batched_tokens=64, max_num_seqs=8)
    a, b = seq(0, list(range(9))), seq(1, list(range(50, 59)))  # 2 full blocks + 1 token each
    for s in (a, b):
        s.prefill_waiters.append(object())
        sch.submit(s)

    def step():
        out = sch.schedule()
        for c in out.chunks:
            c.seq.num_computed_tokens = c.end
            bm.commit(c.seq)
        return out

    step()  # both prefilled: 3 + 3 blocks
    a.append([1, 2, 3, 4])  # a needs a 4th block: b is preempted, its full blocks stay cached
    out = step()
    assert [s.seq_id for s in out.preempted] == [1]
    assert b in sch.waiting and b.block_table == [] and b.num_computed_tokens == 0
    a.append([5, 6, 7, 8])  # a needs a 5th: b's cached blocks are free to take
    out = step()
    assert not out.rejected and not out.preempted and [c.seq for c in out.chunks] == [a]
