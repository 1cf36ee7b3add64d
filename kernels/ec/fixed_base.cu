// Fixed-base scalar multiplication for parameter generation: every point
// of a Groth16 CRS is a multiple of one of two generators, so the host
// builds one table of affine multiples per generator
// (table[j * 2^(w-1) + d - 1] = d * 2^(w*j) * P, prover/src/setup/fixed_base.rs)
// and each scalar costs one mixed addition per window.
//
// Two steps, run by prover/src/backend/cuda/fixed_base.rs on one stream:
//
//  1. fixed_base_mul      one thread per scalar: out of Montgomery form,
//                         signed w-bit digits (msm_digit_key of msm/msm.cu,
//                         the same recoding as the host's table walk), one
//                         table entry (negated for a negative digit) added
//                         per non-zero digit, the XYZZ sum stored.
//  2. fixed_base_affine   Montgomery's trick over a strided run of points
//                         per thread (points t, t + T, t + 2T, ... so that
//                         neighbouring threads touch neighbouring points):
//                         one inversion per run, the affine points stored as
//                         blst lays them out, the identity as all zeros.
//
// Compiled after ff/fr.cuh, ff/fp.cuh (and ff/fp2.cuh for G2),
// ec/xyzz.cuh and msm/msm.cu under MSM_ONLY (its digit helpers only, no
// MSM kernels); FIXED_BASE_G1 or FIXED_BASE_G2 picks the group.

// Montgomery one in Fr's plain limbs: x * 1 * R^-1 = the integer x.
__device__ __forceinline__ fr fixed_base_canonical(const fr &s)
{
    fr one;
    one.l[0] = 1;
    one.l[1] = 0;
    one.l[2] = 0;
    one.l[3] = 0;
    return fr_mul(s, one);
}

// out[i] = scalars[i] * P for i < n, in XYZZ coordinates (ZZ = 0 for the
// identity), with `windows` windows of `window` bits over `table`.
template <class F>
__device__ __forceinline__ void fixed_base_mul(const fr *scalars, u32 n, const ec_affine<F> *table,
                                               u32 window, u32 windows, ec_xyzz<F> *out)
{
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    fr s = fixed_base_canonical(fr_load_ro(scalars + i));
    ec_xyzz<F> acc = ec_inf<F>();
    u32 carry = 0;
    for (u32 j = 0; j < windows; j++) {
        bool neg;
        // Bucket set j of msm_digit_key is table row j: the key is the
        // table index j * 2^(w-1) + |digit| - 1.
        u32 key = msm_digit_key(s, j, j, window, carry, neg);
        if (key == MSM_NO_KEY)
            continue;
        ec_affine<F> q = ec_load(table + key);
        acc = ec_add_affine(acc, neg ? ec_neg(q) : q);
    }
    ec_store(out + i, acc);
}

// out[i] = the affine form of points[i] for i < n; thread t of `threads`
// converts points t, t + threads, ... with one field inversion. The run's
// prefix products wait in out[i].x until the backward pass reads them.
template <class F>
__device__ __forceinline__ void fixed_base_affine(const ec_xyzz<F> *points, u32 n, u32 threads,
                                                  ec_affine<F> *out)
{
    u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= threads || t >= n)
        return;
    F acc = f_one<F>();
    u32 last = t;
    for (u32 i = t; i < n; i += threads) {
        last = i;
        f_store(&out[i].x, acc);
        if (!f_is_zero(f_load(&points[i].zz)))
            acc = f_mul(acc, f_load(&points[i].zzz));
    }
    // A product of non-zero elements (or one): invertible.
    F inv = f_inv(acc);
    for (u32 i = last;; i -= threads) {
        ec_xyzz<F> p = ec_load(points + i);
        ec_affine<F> a;
        if (ec_is_inf(p)) {
            a.x = f_zero<F>();
            a.y = f_zero<F>();
        } else {
            F zzz_inv = f_mul(inv, f_load(&out[i].x));
            inv = f_mul(inv, p.zzz);
            a = ec_to_affine(p, zzz_inv);
        }
        ec_store(out + i, a);
        if (i < threads)
            break;
    }
}

#define FIXED_BASE_KERNELS(G, F)                                                                   \
    extern "C" __global__ void fixed_base_mul_##G(const fr *scalars, u32 n,                        \
                                                  const ec_affine<F> *table, u32 window,           \
                                                  u32 windows, ec_xyzz<F> *out)                    \
    {                                                                                              \
        fixed_base_mul<F>(scalars, n, table, window, windows, out);                                \
    }                                                                                              \
    extern "C" __global__ void fixed_base_affine_##G(const ec_xyzz<F> *points, u32 n, u32 threads, \
                                                     ec_affine<F> *out)                            \
    {                                                                                              \
        fixed_base_affine<F>(points, n, threads, out);                                             \
    }

#ifdef FIXED_BASE_G1
FIXED_BASE_KERNELS(g1, fp)
#endif
#ifdef FIXED_BASE_G2
FIXED_BASE_KERNELS(g2, fp2)
#endif
