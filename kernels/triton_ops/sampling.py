import torch
import triton
import triton.language as tl

from .common import pow2


@triton.jit
def _order_key(x):
    """float32 -> int32 with the same order (negative floats have their magnitude bits flipped)."""
    bits = x.to(tl.int32, bitcast=True)
    return tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)


@triton.jit
def _scaled(logit_ptr, cols, vocab, temp):
    x = tl.load(logit_ptr + cols, mask=cols < vocab, other=float("-inf")).to(tl.float32)
    return tl.where(cols < vocab, x / temp, float("-inf"))


@triton.jit
def _sample_kernel(
    logits_ptr, temp_ptr, topk_ptr, topp_ptr, noise_ptr, out_ptr,
    logits_s0, noise_s0, vocab,
    BLOCK: tl.constexpr,
):  # fmt: skip
    """One program per row. Greedy argmax; or, for temperature > 0: top-k by bisection on the
    order keys of the logits (exact k-th value), softmax over what is kept, top-p by bisection on
    the probabilities' keys, then the exponential race argmax(p / E). Every pass streams the row
    in BLOCK tiles, so any vocabulary size fits."""
    row = tl.program_id(0).to(tl.int64)
    lrow = logits_ptr + row * logits_s0
    nrow = noise_ptr + row * noise_s0
    temp = tl.load(temp_ptr + row)
    top_k = tl.load(topk_ptr + row).to(tl.int64)
    top_p = tl.load(topp_ptr + row)
    offs = tl.arange(0, BLOCK)

    best_val = float("-inf")
    best_idx = 0
    for start in range(0, vocab, BLOCK):
        x = _scaled(lrow, start + offs, vocab, 1.0)
        tile_max = tl.max(x, axis=0)
        tile_idx = start + tl.argmax(x, axis=0)
        better = tile_max > best_val
        best_idx = tl.where(better, tile_idx, best_idx)
        best_val = tl.where(better, tile_max, best_val)
    token = best_idx.to(tl.int64)

    if temp > 0:
        # top-k: the largest key t with count(key >= t) >= k.
        # int64 bounds (derived from a loaded int64 so the type is fixed): the bisection over
        # the int32 key range would overflow in int32.
        lo = top_k * 0 - 2147483648
        if (top_k > 0) & (top_k < vocab):
            hi = lo + 4294967295
            for _ in range(32):
                mid = lo + (hi - lo + 1) // 2
                count = 0
                for start in range(0, vocab, BLOCK):
                    key = _order_key(_scaled(lrow, start + offs, vocab, temp)).to(tl.int64)
                    count += tl.sum((key >= mid).to(tl.int32), axis=0)
                lo = tl.where(count >= top_k, mid, lo)
                hi = tl.where(count >= top_k, hi, mid - 1)
        k_key = lo
        top = best_val / temp
        total = 0.0
        for start in range(0, vocab, BLOCK):
            x = _scaled(lrow, start + offs, vocab, temp)
            keep = _order_key(x).to(tl.int64) >= k_key
            total += tl.sum(tl.where(keep, tl.exp(x - top), 0.0), axis=0)
        # top-p: the largest probability key t with mass(p >= t) >= top_p.
        p_lo = 0
        if top_p < 1.0:
            p_hi = 0x3F800000
            for _ in range(31):
                mid = p_lo + (p_hi - p_lo + 1) // 2
                mass = 0.0
                for start in range(0, vocab, BLOCK):
                    x = _scaled(lrow, start + offs, vocab, temp)
                    keep = _order_key(x).to(tl.int64) >= k_key
                    p = tl.where(keep, tl.exp(x - top) / total, 0.0)
                    big = _order_key(p).to(tl.int64) >= mid
                    mass += tl.sum(tl.where(big, p, 0.0), axis=0)
                p_lo = tl.where(mass >= top_p, mid, p_lo)
                p_hi = tl.where(mass >= top_p, p_hi, mid - 1)
        draw_val = -1.0
        draw_idx = 0
        for start in range(0, vocab, BLOCK):
            cols = start + offs
            x = _scaled(lrow, cols, vocab, temp)
            keep = _order_key(x).to(tl.int64) >= k_key
            p = tl.where(keep, tl.exp(x - top) / total, 0.0)
            keep = keep & (_order_key(p).to(tl.int64) >= p_lo)
            e = tl.load(nrow + cols, mask=cols < vocab, other=1.0)
            race = tl.where(keep, p / e, -1.0)
            tile_max = tl.max(race, axis=0)
            tile_idx = start + tl.argmax(race, axis=0)
            better = tile_max > draw_val
            draw_idx = tl.where(better, tile_idx, draw_idx)
            draw_val = tl.where(better, tile_max, draw_val)
        token = draw_idx.to(tl.int64)
    tl.store(out_ptr + row, token)


def sample(logits, temperature, top_k, top_p, exp_noise):
    batch, vocab = logits.shape
    out = torch.empty(batch, dtype=torch.int64, device=logits.device)
    if batch == 0:
        return out
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    if exp_noise.stride(1) != 1:
        exp_noise = exp_noise.contiguous()
    _sample_kernel[(batch,)](
        logits, temperature, top_k, top_p, exp_noise, out,
        logits.stride(0), exp_noise.stride(0), vocab,
        BLOCK=min(pow2(vocab, 16), 4096),
    )  # fmt: skip
    return out


@triton.jit
def _bitmask_kernel(logits_ptr, mask_ptr, rows_ptr, logits_s0, mask_s0, vocab, words,
                    BLOCK: tl.constexpr):  # fmt: skip
    """Program (i, tile): row ``rows[i]`` of the logits, tokens ``[tile * BLOCK, +BLOCK)``; a
    token whose bit is 0 (or beyond the mask's ``words * 32``) becomes -inf."""
    i = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    row = tl.load(rows_ptr + i).to(tl.int64)
    word = tl.load(mask_ptr + i * mask_s0 + cols // 32, mask=cols < words * 32, other=0)
    bit = (word >> (cols % 32)) & 1
    ptrs = logits_ptr + row * logits_s0 + cols
    tl.store(ptrs, float("-inf"), mask=(cols < vocab) & (bit == 0))


def apply_token_bitmask(logits, bitmask, rows):
    vocab = logits.shape[1]
    block = 1024
    grid = (len(rows), triton.cdiv(vocab, block))
    _bitmask_kernel[grid](
        logits, bitmask, rows, logits.stride(0), bitmask.stride(0), vocab, bitmask.shape[1],
        BLOCK=block,
    )  # fmt: skip
