import triton
import triton.language as tl

from .common import pow2


@triton.jit
def _write_kv_kernel(
    k_ptr, v_ptr, kc_ptr, vc_ptr, slot_ptr,
    k_s0, k_s1, v_s0, v_s1,
    num_heads, head_dim,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    h = tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_D)
    if slot >= 0:
        mask = (h[:, None] < num_heads) & (d[None, :] < head_dim)
        dst = slot * num_heads * head_dim + h[:, None] * head_dim + d[None, :]
        k = tl.load(k_ptr + t * k_s0 + h[:, None] * k_s1 + d[None, :], mask=mask)
        tl.store(kc_ptr + dst, k, mask=mask)
        v = tl.load(v_ptr + t * v_s0 + h[:, None] * v_s1 + d[None, :], mask=mask)
        tl.store(vc_ptr + dst, v, mask=mask)


def write_kv_cache(k, v, k_cache, v_cache, slot_mapping):
    """One program per token; k and v may be strided views (e.g. slices of a fused QKV)."""
    if k.stride(2) != 1:
        k = k.contiguous()
    if v.stride(2) != 1:
        v = v.contiguous()
    num_heads, head_dim = k.shape[1], k.shape[2]
    if k.shape[0] == 0:
        return
    _write_kv_kernel[(k.shape[0],)](
        k, v, k_cache, v_cache, slot_mapping,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        num_heads, head_dim,
        BLOCK_H=pow2(num_heads), BLOCK_D=pow2(head_dim),
    )  # fmt: skip
