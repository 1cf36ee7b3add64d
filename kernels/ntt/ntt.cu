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
// and coset shifts or the 1/n scale fold into the first load or last store.
//
// A block always holds 256 elements: 256/r independent DFTs side by side,
// interleaved in shared memory (element j of DFT g at j*G + g) so that
// neighbouring threads touch neighbouring addresses on load, store and in
// the butterflies. Shared memory is limb-major to avoid bank conflicts on
// 64-bit accesses.

#define NTT_BLOCK_ELEMS 256
#define NTT_MAX_LG_RADIX 8
#define NTT_THREADS (NTT_BLOCK_ELEMS / 2)

// Element y of a power table split in two: base^e = lo[e & lo_mask] * hi[e >> lo_bits].
__device__ __forceinline__ fr pow_lookup(const fr *lo, const fr *hi, u32 lo_bits, u32 e)
{
    fr v = fr_load_ro(lo + (e & ((1u << lo_bits) - 1)));
    u32 h = e >> lo_bits;
    if (h != 0) {
        v = fr_mul(v, fr_load_ro(hi + h));
    }
    return v;
}

__device__ __forceinline__ fr smem_get(const u64 *s, u32 idx)
{
    fr v;
    v.l[0] = s[idx];
    v.l[1] = s[idx + NTT_BLOCK_ELEMS];
    v.l[2] = s[idx + 2 * NTT_BLOCK_ELEMS];
    v.l[3] = s[idx + 3 * NTT_BLOCK_ELEMS];
    return v;
}

__device__ __forceinline__ void smem_put(u64 *s, u32 idx, fr v)
{
    s[idx] = v.l[0];
    s[idx + NTT_BLOCK_ELEMS] = v.l[1];
    s[idx + 2 * NTT_BLOCK_ELEMS] = v.l[2];
    s[idx + 3 * NTT_BLOCK_ELEMS] = v.l[3];
}

__device__ __forceinline__ u32 bit_reverse(u32 v, u32 bits)
{
    return bits == 0 ? 0 : (__brev(v) >> (32 - bits));
}

// Post-multiplication modes of the last pass.
#define NTT_POST_NONE 0
// Multiply by the single constant post_lo[0] (the 1/n of a plain inverse).
#define NTT_POST_CONST 1
// Multiply by post_lo[idx & mask] * post_hi[idx >> bits] (coset shift with 1/n folded in).
#define NTT_POST_TABLE 2

// One pass. `tw_lo`/`tw_hi` hold the powers of the transform's root w
// (w = omega or omega^-1) split at `tw_bits`; `radix_tw` holds the powers of
// the 2^NTT_MAX_LG_RADIX-th root of unity derived from the same w (first half).
extern "C" __global__ void __launch_bounds__(NTT_THREADS)
ntt_pass(const fr *__restrict__ x, fr *__restrict__ y, u32 lg_n, u32 lg_p, u32 deg,
         const fr *__restrict__ tw_lo, const fr *__restrict__ tw_hi, u32 tw_bits,
         const fr *__restrict__ radix_tw,
         u32 post_mode, const fr *__restrict__ post_lo, const fr *__restrict__ post_hi, u32 post_bits)
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
                v = fr_mul(v, pow_lookup(tw_lo, tw_hi, tw_bits, exp));
            }
        }
        smem_put(s, e, v);
    }
    __syncthreads();

    // r-point DIF butterflies: natural in, bit-reversed out.
    // Thread tid works on DFT g = tid % groups, butterfly q = tid / groups.
    {
        const u32 g = tid & (groups - 1);
        const u32 q = tid >> lg_groups;
        for (u32 rnd = 0; rnd < deg; rnd++) {
            const u32 lg_half = deg - 1 - rnd;
            const u32 half = 1u << lg_half;
            const u32 di = q & (half - 1);
            const u32 j0 = ((q >> lg_half) << (lg_half + 1)) + di;
            const u32 j1 = j0 + half;
            const u32 a0 = j0 * groups + g;
            const u32 a1 = j1 * groups + g;
            fr u0 = smem_get(s, a0);
            fr u1 = smem_get(s, a1);
            fr sum = fr_add(u0, u1);
            fr diff = fr_sub(u0, u1);
            if (di != 0) {
                // (2*half)-th root to the power di = radix root to di * 2^(8 - deg + rnd).
                diff = fr_mul(diff, fr_load_ro(radix_tw + (di << (NTT_MAX_LG_RADIX - deg + rnd))));
            }
            // Each thread rewrites only the two slots it read: one barrier per round.
            smem_put(s, a0, sum);
            smem_put(s, a1, diff);
            __syncthreads();
        }
    }

    // Store U[m] (held at bitrev(m)) with the optional post factor.
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
            v = fr_mul(v, fr_load_ro(post_lo));
        } else if (post_mode == NTT_POST_TABLE) {
            v = fr_mul(v, pow_lookup(post_lo, post_hi, post_bits, out));
        }
        fr_store(y + out, v);
    }
}
