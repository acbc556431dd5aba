"""Fixed-size KV blocks with reference counts and chained-hash prefix caching.

A block is *used* (ref_count > 0), *cached* (ref_count 0 but its full, computed contents are
registered under a hash, so a later sequence with the same prefix can take it back), or *free*.
Free and cached blocks wait in one LRU queue: allocation takes the least recently freed block,
dropping its hash. A full block's hash chains its parent's, so equal hashes mean equal prefixes
(the token ids are compared too, against collisions). Blocks are hashed only once computed.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from .sequence import Sequence


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None
    token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class BlockStats:
    num_blocks: int
    free: int  # holding nothing reusable
    cached: int  # unreferenced but reusable through the prefix cache
    used: int  # referenced by a sequence
    prefix_queries: int  # tokens looked up in the prefix cache
    prefix_hits: int  # of which found

    @property
    def hit_rate(self) -> float:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0


class BlockManager:
    """Allocates KV blocks to sequences. Not thread-safe: the worker thread owns it."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.lru: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.hash_to_block: dict[int, int] = {}
        self.prefix_queries = 0
        self.prefix_hits = 0

    @property
    def num_free(self) -> int:
        """Blocks that can be allocated now (free or cached)."""
        return len(self.lru)

    def blocks_needed(self, seq: Sequence, num_tokens: int) -> int:
        return max(0, -(-num_tokens // self.block_size) - len(seq.block_table))

    @staticmethod
    def chain_hash(parent: int | None, token_ids: tuple[int, ...]) -> int:
        return hash((parent, token_ids))

    def match_prefix(self, seq: Sequence) -> int:
        """Give a block-less sequence the cached blocks of its longest cached prefix, up to its
        ``prefix_match_limit`` (the last token is always computed). Returns the tokens matched."""
        assert not seq.block_table and seq.num_computed_tokens == 0
        if not self.enable_prefix_caching:
            return 0
        bs = self.block_size
        full = max(0, seq.prefix_match_limit) // bs
        self.prefix_queries += full * bs
        parent = None
        for i in range(full):
            ids = tuple(seq.token_ids[i * bs : (i + 1) * bs])
            h = self.chain_hash(parent, ids)
            bid = self.hash_to_block.get(h)
            if bid is None or self.blocks[bid].token_ids != ids:
                break
            self._ref(bid)
            seq.block_table.append(bid)
            parent = h
        matched = len(seq.block_table) * bs
        self.prefix_hits += matched
        seq.num_hashed_blocks = len(seq.block_table)
        seq.num_computed_tokens = seq.num_cached_tokens = matched
        return matched

    def allocate(self, seq: Sequence, num_tokens: int) -> bool:
        """Grow the block table to hold ``num_tokens`` tokens; False (nothing taken) if short."""
        need = self.blocks_needed(seq, num_tokens)
        if need > len(self.lru):
            return False
        for _ in range(need):
            bid, _ = self.lru.popitem(last=False)
            block = self.blocks[bid]
            if block.hash is not None and self.hash_to_block.get(block.hash) == bid:
                del self.hash_to_block[block.hash]
            block.hash, block.token_ids, block.ref_count = None, (), 1
            seq.block_table.append(bid)
        return True

    def fork(self, parent: Sequence, child: Sequence, num_tokens: int) -> None:
        """Share the parent's first ``num_tokens // block_size`` blocks (already computed)."""
        assert not child.block_table
        n = min(num_tokens, parent.num_computed_tokens) // self.block_size
        for bid in parent.block_table[:n]:
            self._ref(bid)
            child.block_table.append(bid)
        child.num_computed_tokens = n * self.block_size

    def free(self, seq: Sequence) -> None:
        """Drop the sequence's references; its last blocks become the first to be reused."""
        for bid in reversed(seq.block_table):
            block = self.blocks[bid]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.lru[bid] = None
        seq.block_table = []
        seq.num_computed_tokens = seq.num_cached_tokens = seq.num_hashed_blocks = 0

    def commit(self, seq: Sequence) -> None:
        """Register the sequence's newly computed full blocks in the prefix cache."""
        if not self.enable_prefix_caching:
            return
        bs = self.block_size
        start, end = seq.num_hashed_blocks, seq.num_computed_tokens // bs
        parent = self.blocks[seq.block_table[start - 1]].hash if start else None
        for i in range(start, end):
            block = self.blocks[seq.block_table[i]]
            if block.hash is None:
                ids = tuple(seq.token_ids[i * bs : (i + 1) * bs])
                block.hash, block.token_ids = self.chain_hash(parent, ids), ids
                self.hash_to_block.setdefault(block.hash, block.block_id)
            parent = block.hash
        seq.num_hashed_blocks = max(start, end)

    def _ref(self, bid: int) -> None:
        block = self.blocks[bid]
        if block.ref_count == 0:
            del self.lru[bid]
        block.ref_count += 1

    def stats(self) -> BlockStats:
        """A snapshot; safe to call from another thread (``list`` copies the queue atomically)."""
        unreferenced = list(self.lru)
        cached = sum(1 for bid in unreferenced if self.blocks[bid].hash is not None)
        return BlockStats(
            num_blocks=len(self.blocks),
            free=len(unreferenced) - cached,
            cached=cached,
            used=len(self.blocks) - len(unreferenced),
            prefix_queries=self.prefix_queries,
            prefix_hits=self.prefix_hits,
        )
