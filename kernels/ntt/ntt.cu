// Radix-2^deg Stockham passes of the number-theoretic transform over Fr.
//
// Compiled after ff/fr.cuh (the Rust side concatenates the sources, so the
// module needs no include path at run time).
//
// A transform of n = 2^lg_n points is a sequence of passes; pass number s
// has already combined p = 2^lg_p points (p = 1 for the first pass) and
// combines r = 2^deg more. For every i in [0, n/r), with k = i mod p:
//   u[j]  = x[i + j*n/r] * w^(j*k*n/(p*r))          (twiddle, skipped when p = 1)
//   U     = r-point DFT of u                         (in shared memory)
//   y[(i - k)*r + k + m*p] = U[m] * post(index)      (post only on the last pass)
// Inputs and outputs are in natural order, so no bit-reversal pass is needed
// and coset shifts or the 1/n scale fold into the last store.
//
// Between rounds and passes values are lazy (in [0, 2r), ff/fr.cuh): each
// twiddle product skips its final subtraction (its first factor, the
// table entry, is canonical), and only the last pass's store makes values
// canonical again (3 % of the phase at 2^24).
//
// A block always holds 256 elements: 256/r independent DFTs side by side,
// interleaved in shared memory (element j of DFT g at j*G + g) so that
// neighbouring threads touch neighbouring addresses on load, store and in
// the butterflies. Shared memory is limb-major to avoid bank conflicts on
// 64-bit accesses.

#define NTT_BLOCK_ELEMS 256
#define NTT_MAX_LG_RADIX 8
#define NTT_THREADS (NTT_BLOCK_ELEMS / 2)

// Position of element idx in shared memory: idx XOR F(idx >> 4) on its low
// 4 bits, F(x) = x ^ ((x & 1) << 3). A 64-bit access by a warp is
// conflict-free when its 32 lanes hit each of the 16 bank pairs (position
// mod 16) twice. Without the XOR, the bit-reversed reads of the store put
// 16 lanes on one bank pair and the rounds with half <= 8 two; with it,
// every access pattern of this kernel at radix 256 (consecutive,
// bit-reversed, each round's butterflies) maps its 5 lane bits onto the 4
// bank-pair bits with full rank (checked exhaustively when chosen).
// idx < 256, so idx >> 4 needs no mask.
__device__ __forceinline__ u32 smem_slot(u32 idx)
{
    return idx ^ (idx >> 4) ^ ((idx >> 1) & 8);
}

__device__ __forceinline__ fr smem_get(const u64 *s, u32 idx)
{
    // One pointer and constant offsets per limb: indexing s[idx + k*256]
    // in u32 makes NVRTC (64-bit shared pointers, unlike nvcc) redo the
    // address arithmetic for every limb, 4 % of the phase.
    const u64 *p = s + smem_slot(idx);
    fr v;
    v.l[0] = p[0];
    v.l[1] = p[NTT_BLOCK_ELEMS];
    v.l[2] = p[2 * NTT_BLOCK_ELEMS];
    v.l[3] = p[3 * NTT_BLOCK_ELEMS];
    return v;
}

__device__ __forceinline__ void smem_put(u64 *s, u32 idx, fr v)
{
    u64 *p = s + smem_slot(idx);
    p[0] = v.l[0];
    p[NTT_BLOCK_ELEMS] = v.l[1];
    p[2 * NTT_BLOCK_ELEMS] = v.l[2];
    p[3 * NTT_BLOCK_ELEMS] = v.l[3];
}

__device__ __forceinline__ u32 bit_reverse(u32 v, u32 bits)
{
    return bits == 0 ? 0 : (__brev(v) >> (32 - bits));
}

// Post-multiplication modes of the last pass.
#define NTT_POST_NONE 0
// Multiply by the single constant post[0] (the 1/n of a plain inverse).
#define NTT_POST_CONST 1
// Multiply by post[idx] (coset shift with 1/n folded in).
#define NTT_POST_TABLE 2
// Write fa[idx] * value * post[0] to y: a*b over Z(g), fused into the last
// pass of b's coset NTT (y is a's buffer; each element is read and written
// by the same thread).
#define NTT_POST_MUL_SCALE 3
// value * post[idx] - fb[idx]: the coset iNTT's un-shift and 1/n, minus c's
// coefficients over Z(g) (fb), which gives h.
#define NTT_POST_TABLE_SUB 4

// One round of butterflies with half = 2^(deg - 1 - rnd): thread q of DFT g
// combines elements j0 and j0 + half. In the rounds with half <= 4 the
// butterflies with twiddle 1 (di = 0) are gathered into whole warps (di
// from the top bits of q), which then skip the multiplication; elsewhere
// di runs along the lanes (at radix 256, with the slot XOR, both patterns
// are free of bank conflicts; without it the warp-gathered one is not).
__device__ __forceinline__ void ntt_round(u64 *s, const fr *__restrict__ radix_tw, u32 q, u32 g,
                                          u32 groups, u32 deg, u32 rnd)
{
    const u32 lg_half = deg - 1 - rnd;
    const u32 half = 1u << lg_half;
    const u32 lg_q = deg - 1;
    const bool by_warp = lg_half <= 2;
    const u32 di = by_warp ? q >> (lg_q - lg_half) : q & (half - 1);
    const u32 blk = by_warp ? q & ((1u << (lg_q - lg_half)) - 1) : q >> lg_half;
    const u32 j0 = (blk << (lg_half + 1)) + di;
    const u32 a0 = j0 * groups + g;
    const u32 a1 = (j0 + half) * groups + g;
    fr u0 = smem_get(s, a0);
    fr u1 = smem_get(s, a1);
    fr sum = fr_add_lazy(u0, u1);
    fr diff = fr_sub_lazy(u0, u1);
    if (di != 0) {
        // (2*half)-th root to the power di = radix root to di * 2^(8 - deg + rnd).
        diff = fr_mul_lazy(fr_load_ro(radix_tw + (di << (NTT_MAX_LG_RADIX - deg + rnd))), diff);
    }
    // Each thread rewrites only the two slots it read: one barrier per round.
    smem_put(s, a0, sum);
    smem_put(s, a1, diff);
    __syncthreads();
}

// One pass. `tw` holds omega^t for every t < n (a table lookup is cheaper
// than the multiplication that would rebuild a twiddle); an inverse
// transform reads omega^-t as omega^(n-t). `radix_tw` holds the first half
// of the powers of the 2^NTT_MAX_LG_RADIX-th root of unity of the
// transform's own direction.
// At least 12 blocks per multiprocessor caps the registers at 40 (48
// otherwise; costs a 32-byte spill outside the rounds): the pass is
// latency-bound, and the extra resident warps gain 0.5 % at 2^24 (2.3 %
// before the shared-memory XOR).
extern "C" __global__ void __launch_bounds__(NTT_THREADS, 12)
ntt_pass(const fr *__restrict__ x, fr *y, u32 lg_n, u32 lg_p, u32 deg,
         const fr *__restrict__ tw, u32 inverse, const fr *__restrict__ radix_tw,
         u32 post_mode, const fr *__restrict__ post, const fr *fa, const fr *__restrict__ fb)
{
    __shared__ u64 s[4 * NTT_BLOCK_ELEMS];

    const u32 tid = threadIdx.x;
    const u32 groups = NTT_BLOCK_ELEMS >> deg;       // DFTs in this block
    const u32 lg_groups = NTT_MAX_LG_RADIX - deg;
    const u32 stride = 1u << (lg_n - deg);            // n / r
    const u32 p = 1u << lg_p;
    const u32 i_base = blockIdx.x * groups;

    // Load with the pre-twiddle: thread handles elements e = tid and tid + 128
    // of the block, e = j*groups + g.
#pragma unroll
    for (u32 half = 0; half < 2; half++) {
        const u32 e = tid + half * NTT_THREADS;
        const u32 g = e & (groups - 1);
        const u32 j = e >> lg_groups;
        const u32 i = i_base + g;
        fr v = fr_load(x + i + (size_t)j * stride);
        if (lg_p != 0) {
            const u32 k = i & (p - 1);
            // j*k*n/(p*r) < n fits in 32 bits for n <= 2^31.
            const u32 exp = (j * k) << (lg_n - lg_p - deg);
            if (exp != 0) {
                const u32 t = inverse ? (1u << lg_n) - exp : exp;
                v = fr_mul_lazy(fr_load_ro(tw + t), v);
            }
        }
        smem_put(s, e, v);
    }
    __syncthreads();

    // r-point DIF butterflies: natural in, bit-reversed out. (An unrolled
    // copy for deg = 8, with the round's index arithmetic folded to
    // constants, measured 1 % slower: more registers.)
    for (u32 rnd = 0; rnd < deg; rnd++) {
        ntt_round(s, radix_tw, tid >> lg_groups, tid & (groups - 1), groups, deg, rnd);
    }

    // Store U[m] (held at bitrev(m)) with the optional post factor; the
    // last pass makes every value canonical, the others store lazy ones.
    const bool last = lg_p + deg == lg_n;
#pragma unroll
    for (u32 half = 0; half < 2; half++) {
        const u32 e = tid + half * NTT_THREADS;
        const u32 g = e & (groups - 1);
        const u32 m = e >> lg_groups;
        const u32 i = i_base + g;
        const u32 k = i & (p - 1);
        const u32 out = ((i - k) << deg) + k + (m << lg_p);
        fr v = smem_get(s, bit_reverse(m, deg) * groups + g);
        if (post_mode == NTT_POST_CONST) {
            v = fr_mul(fr_load_ro(post), v);
        } else if (post_mode == NTT_POST_TABLE) {
            v = fr_mul(fr_load_ro(post + out), v);
        } else if (post_mode == NTT_POST_MUL_SCALE) {
            v = fr_mul(fr_mul(fr_load(fa + out), v), fr_load_ro(post));
        } else if (post_mode == NTT_POST_TABLE_SUB) {
            v = fr_sub(fr_mul(fr_load_ro(post + out), v), fr_load_ro(fb + out));
        } else if (last) {
            v = fr_reduce_once(v);
        }
        fr_store(y + out, v);
    }
}

// out[i] = scale_lo[i & mask] * hi[i >> bits] for i < n: expands a split
// power table into a full one on the device (n multiplications here instead
// of n on the host and n*32 bytes over PCIe).
extern "C" __global__ void expand_powers(fr *__restrict__ out, const fr *__restrict__ lo,
                                         const fr *__restrict__ hi, u32 bits, u32 n)
{
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    fr v = fr_load_ro(lo + (i & ((1u << bits) - 1)));
    const u32 h = i >> bits;
    if (h != 0) {
        v = fr_mul(v, fr_load_ro(hi + h));
    }
    fr_store(out + i, v);
}
