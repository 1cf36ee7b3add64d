// Pippenger multi-scalar multiplication over G1, one kernel per step.
//
// Compiled after ff/fr.cuh, ff/fp.cuh (and ff/fp2.cuh for G2) and
// ec/xyzz.cuh; msm_g1.cu or msm_g2.cu then instantiates the group steps
// (6 to 8) for its group. The host (prover/src/backend/cuda/msm.rs) runs,
// on one stream:
//
//  1. msm_canonical       scalars out of Montgomery form, in place
//  2. msm_count           signed c-bit digits; per bucket key the number of
//                         (point, window) pairs with that digit
//  3. msm_max             the largest bucket (sizes the reduction levels)
//  4. msm_scan_*          exclusive prefix sums (bucket offsets)
//  5. msm_scatter         the counting sort: entries grouped by bucket key
//  6. msm_segment_counts, bucket accumulation in levels: level 1 cuts the
//     msm_accumulate_*    sorted entries into segments of exactly S, one
//                         thread each, emitting a partial sum per bucket a
//                         segment touches; the next levels cut each
//                         bucket's partials into tasks of at most 32
//                         (msm_task_counts), until each bucket has one sum.
//                         Work per thread is bounded by S whatever the digit
//                         distribution, so a bucket holding half the points
//                         (scalars equal to one) is spread over many threads
//                         instead of stalling one, and the threads of a warp
//                         at level 1 all do exactly S additions.
//  7. msm_bucket_reduce   per window, chunks of buckets: Σ digit · bucket by
//                         running sums
//  8. msm_window_sum      per window, the chunks' sums (block trees, in
//                         two rounds when a window has many chunks)
// The host combines the windows (Horner with c doublings each).
//
// Keys: window w, digit magnitude d in [1, 2^(c-1)] -> w * 2^(c-1) + d - 1.
// Entries: point index in bits 0..30, bit 31 set when the digit is negative.
// Zero digits produce no entry, so zero scalars cost nothing after step 2.

#define MSM_NO_KEY 0xffffffffu
#define MSM_SIGN 0x80000000u
#define MSM_SCAN_THREADS 256
#define MSM_SCAN_ELEMS (4 * MSM_SCAN_THREADS)
#define MSM_WINDOW_THREADS 128

// Limb k of s by selects: a dynamic index would put s in local memory.
__device__ __forceinline__ u64 msm_limb(const fr &s, u32 k)
{
    u64 v = k == 0 ? s.l[0] : s.l[1];
    v = k == 2 ? s.l[2] : v;
    return k == 3 ? s.l[3] : v;
}

// Bits [off, off + c) of the canonical scalar s (c <= 32, off < 256).
__device__ __forceinline__ u32 msm_bits(const fr &s, u32 off, u32 c)
{
    u32 limb = off >> 6;
    u32 shift = off & 63;
    u64 v = msm_limb(s, limb) >> shift;
    if (shift + c > 64 && limb < 3)
        v |= msm_limb(s, limb + 1) << (64 - shift);
    return (u32)v & ((1u << c) - 1);
}

// Digit of window w given the carry from window w - 1; updates carry.
// Returns the bucket key in bucket set `set`, or MSM_NO_KEY for a zero
// digit; *neg says whether the digit is negative.
__device__ __forceinline__ u32 msm_digit_key(const fr &s, u32 w, u32 set, u32 c, u32 &carry,
                                             bool &neg)
{
    u32 half = 1u << (c - 1);
    u32 d = msm_bits(s, w * c, c) + carry;
    neg = d > half;
    if (neg) {
        d = (1u << c) - d;
        carry = 1;
    } else {
        carry = 0;
    }
    return d == 0 ? MSM_NO_KEY : set * half + d - 1;
}

// Scalar i, or zero past the end: lanes past n still run the window loop
// (with no digits) so that whole warps take part in the warp-wide merges.
__device__ __forceinline__ fr msm_scalar_or_zero(const fr *s, u32 i, u32 n)
{
    fr v;
    if (i < n) {
        v = fr_load_ro(s + i);
    } else {
        v.l[0] = v.l[1] = v.l[2] = v.l[3] = 0;
    }
    return v;
}

// The index steps (1 to 5, segment and task counts) are integer code of
// their own unit; a unit that defines MSM_ONLY compiles only the steps it
// names (MSM_ONLY_INDEX here, MSM_ONLY_<STEP> in msm_g1.cu / msm_g2.cu),
// so the curve steps compile in parallel instead of one after another.
#if !defined(MSM_ONLY) || defined(MSM_ONLY_INDEX)
extern "C" __global__ void msm_canonical(fr *s, u32 n)
{
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    fr one;
    one.l[0] = 1;
    one.l[1] = 0;
    one.l[2] = 0;
    one.l[3] = 0;
    // x * 1 * R^-1 = the integer x, canonical.
    fr_store(s + i, fr_mul(fr_load(s + i), one));
}

// Every lane of the warp runs the window loop (no early exit), so the warp
// can merge equal keys with one atomic: real witnesses put most points in a
// few buckets, and 32 lanes hitting one counter would serialise.
//
// With a table of multiples (sets < windows), window w = g·sets + j uses
// bucket set j and the base in table row g (2^(c·sets·g) times the base):
// entry = i + g·stride. Without one, sets = windows and stride = 0.
extern "C" __global__ void msm_count(const fr *s, u32 n, u32 c, u32 windows, u32 sets,
                                     u32 *counts)
{
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    fr v = msm_scalar_or_zero(s, i, n);
    u32 lane = threadIdx.x & 31;
    u32 carry = 0;
    for (u32 w = 0; w < windows; w++) {
        bool neg;
        u32 key = msm_digit_key(v, w, w % sets, c, carry, neg);
        u32 peers = __match_any_sync(0xffffffffu, key);
        if (key != MSM_NO_KEY && lane == (u32)(__ffs(peers) - 1))
            atomicAdd(&counts[key], (u32)__popc(peers));
    }
}

// Same digits as msm_count; each entry lands at its bucket's cursor.
// The cursor atomics return the slot and bound the kernel (74 % of its
// cycles waiting at 2^24): the L2's rate for returning atomics, not their
// latency, since issuing eight windows' atomics before using any measured
// no faster (docs/gpu.md). A faster sort needs fewer of them and writes
// that coalesce: a two-pass sort (pairs staged by key range with shared
// counters, then placed per key with one atomic a chunk) measured slower
// (sort 18.8 ms against 14.4 at 2^24), since each pass still scattered its
// writes one pair to a sector, as many L2 operations as the atomics saved.
extern "C" __global__ void msm_scatter(const fr *s, u32 n, u32 c, u32 windows, u32 sets,
                                       u32 stride, u32 *cursor, u32 *entries)
{
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    fr v = msm_scalar_or_zero(s, i, n);
    u32 lane = threadIdx.x & 31;
    u32 below = (1u << lane) - 1;
    u32 carry = 0;
    for (u32 w = 0; w < windows; w++) {
        bool neg;
        u32 key = msm_digit_key(v, w, w % sets, c, carry, neg);
        u32 peers = __match_any_sync(0xffffffffu, key);
        u32 leader = __ffs(peers) - 1;
        u32 base = 0;
        if (key != MSM_NO_KEY && lane == leader)
            base = atomicAdd(&cursor[key], (u32)__popc(peers));
        base = __shfl_sync(0xffffffffu, base, leader);
        if (key != MSM_NO_KEY)
            entries[base + __popc(peers & below)] = (i + (w / sets) * stride) | (neg ? MSM_SIGN : 0u);
    }
}

extern "C" __global__ void msm_max(const u32 *v, u32 n, u32 *out)
{
    u32 m = 0;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        m = max(m, v[i]);
#pragma unroll
    for (int d = 16; d > 0; d >>= 1)
        m = max(m, __shfl_xor_sync(0xffffffffu, m, d));
    if ((threadIdx.x & 31) == 0)
        atomicMax(out, m);
}

// Exclusive scan of MSM_SCAN_ELEMS elements per block, in place; the
// block's total goes to sums[blockIdx.x].
extern "C" __global__ void msm_scan_local(u32 *data, u32 n, u32 *sums)
{
    __shared__ u32 warp_total[MSM_SCAN_THREADS / 32];
    u32 base = blockIdx.x * MSM_SCAN_ELEMS + threadIdx.x * 4;
    u32 x[4];
    u32 local = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        x[k] = base + k < n ? data[base + k] : 0;
        local += x[k];
    }
    u32 lane = threadIdx.x & 31;
    u32 warp = threadIdx.x >> 5;
    u32 incl = local;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        u32 y = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= (u32)d)
            incl += y;
    }
    if (lane == 31)
        warp_total[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        u32 t = lane < MSM_SCAN_THREADS / 32 ? warp_total[lane] : 0;
        u32 ti = t;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            u32 y = __shfl_up_sync(0xffffffffu, ti, d);
            if (lane >= (u32)d)
                ti += y;
        }
        if (lane < MSM_SCAN_THREADS / 32)
            warp_total[lane] = ti - t;
        if (lane == MSM_SCAN_THREADS / 32 - 1)
            sums[blockIdx.x] = ti;
    }
    __syncthreads();
    u32 run = warp_total[warp] + incl - local;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        if (base + k < n)
            data[base + k] = run;
        run += x[k];
    }
}

// Exclusive scan of the m block sums, in place, by one block of
// MSM_SCAN_THREADS threads (each takes a contiguous run).
extern "C" __global__ void msm_scan_sums(u32 *sums, u32 m)
{
    __shared__ u32 part[MSM_SCAN_THREADS];
    u32 per = (m + MSM_SCAN_THREADS - 1) / MSM_SCAN_THREADS;
    u32 begin = threadIdx.x * per;
    u32 end = min(begin + per, m);
    u32 local = 0;
    for (u32 i = begin; i < end; i++)
        local += sums[i];
    part[threadIdx.x] = local;
    __syncthreads();
    if (threadIdx.x == 0) {
        u32 run = 0;
        for (u32 t = 0; t < MSM_SCAN_THREADS; t++) {
            u32 v = part[t];
            part[t] = run;
            run += v;
        }
    }
    __syncthreads();
    u32 run = part[threadIdx.x];
    for (u32 i = begin; i < end; i++) {
        u32 v = sums[i];
        sums[i] = run;
        run += v;
    }
}

extern "C" __global__ void msm_scan_add(u32 *data, u32 n, const u32 *sums)
{
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        data[i] += sums[i / MSM_SCAN_ELEMS];
}

// tasks[k] = ceil(counts[k] / per_task); tasks[keys] = 0 (the scan's total slot).
extern "C" __global__ void msm_task_counts(const u32 *counts, u32 keys, u32 per_task, u32 *tasks)
{
    u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < keys)
        tasks[k] = (counts[k] + per_task - 1) / per_task;
    else if (k == keys)
        tasks[k] = 0;
}

#endif // MSM_ONLY_INDEX

// The bucket of task t: the last key whose task offset is <= t. Empty
// buckets share their offset with the next key, so this is never one.
__device__ __forceinline__ u32 msm_task_key(const u32 *task_off, u32 keys, u32 t)
{
    u32 lo = 0, hi = keys;
    while (hi - lo > 1) {
        u32 mid = (lo + hi) >> 1;
        if (task_off[mid] <= t)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

// Level 1 cuts the sorted entries into segments of exactly S, one thread
// each, whatever the bucket boundaries: every thread of a warp does the
// same number of additions (tasks cut per bucket left a warp waiting for
// its longest bucket, about 85 % efficiency for Poisson-sized buckets). A
// segment emits one partial sum per bucket it touches, so bucket k gets
// one partial from each segment its entries overlap: np_k of them, at
// part_off[k] (the exclusive scan of np), in segment order.
__device__ __forceinline__ u32 msm_segments_of(u32 off, u32 count, u32 seg)
{
    return count == 0 ? 0 : (off + count - 1) / seg - off / seg + 1;
}

#if !defined(MSM_ONLY) || defined(MSM_ONLY_INDEX)
// np[k] = the number of segments bucket k's entries overlap; np[keys] = 0.
extern "C" __global__ void msm_segment_counts(const u32 *bucket_off, const u32 *counts, u32 keys,
                                              u32 seg, u32 *np)
{
    u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < keys)
        np[k] = msm_segments_of(bucket_off[k], counts[k], seg);
    else if (k == keys)
        np[k] = 0;
}

#endif // MSM_ONLY_INDEX

// Segment t: entries [t·S, t·S + S) of the sorted list; the bucket of an
// entry is the last key whose offset is <= its position (empty buckets
// share their offset with the next key, so the search never lands on one).
template <class F>
__device__ __forceinline__ void msm_accumulate_segments(const ec_affine<F> *bases, const u32 *entries,
                                                        const u32 *bucket_off, u32 keys,
                                                        const u32 *part_off, u32 seg,
                                                        ec_xyzz<F> *out)
{
    u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    u32 total = bucket_off[keys];
    u32 begin = t * seg;
    if (begin >= total)
        return;
    u32 end = min(begin + seg, total);
    u32 k = msm_task_key(bucket_off, keys, begin);
    u32 k_end = bucket_off[k + 1];
    ec_xyzz<F> acc = ec_inf<F>();
    for (u32 e = begin; e < end; e++) {
        if (e == k_end) {
            ec_store(out + part_off[k] + t - bucket_off[k] / seg, acc);
            k = msm_task_key(bucket_off, keys, e);
            k_end = bucket_off[k + 1];
            acc = ec_inf<F>();
        }
        u32 entry = __ldg(entries + e);
        ec_affine<F> p = ec_load(bases + (entry & ~MSM_SIGN));
        if (entry & MSM_SIGN)
            p = ec_neg(p);
        acc = ec_add_affine_inline(acc, p);
    }
    ec_store(out + part_off[k] + t - bucket_off[k] / seg, acc);
}

// Level 2 and later: the same over the previous level's partial sums,
// which are grouped by key at in_off[k], in_count[k] of them.
template <class F>
__device__ __forceinline__ void msm_accumulate_partials(const ec_xyzz<F> *in, const u32 *in_off,
                                                        const u32 *in_count, const u32 *task_off,
                                                        u32 keys, u32 per_task, ec_xyzz<F> *out)
{
    u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= task_off[keys])
        return;
    u32 k = msm_task_key(task_off, keys, t);
    u32 begin = in_off[k] + (t - task_off[k]) * per_task;
    u32 end = min(begin + per_task, in_off[k] + in_count[k]);
    ec_xyzz<F> acc = ec_load(in + begin);
    for (u32 e = begin + 1; e < end; e++)
        acc = ec_add(acc, ec_load(in + e));
    ec_store(out + t, acc);
}

// k * p for a small k (a bucket index), double-and-add from the top bit.
template <class F> __device__ __forceinline__ ec_xyzz<F> ec_mul_small(const ec_xyzz<F> &p, u32 k)
{
    ec_xyzz<F> r = ec_inf<F>();
    for (int b = 31 - __clz(k | 1); b >= 0; b--) {
        r = ec_dbl(r);
        if ((k >> b) & 1)
            r = ec_add(r, p);
    }
    return k == 0 ? ec_inf<F>() : r;
}

// Chunk `ci` of window w covers buckets [lo, lo + chunk) (bucket b holds
// digit b + 1): Σ (b - lo + 1)·B_b by a running sum from the top, plus
// lo · Σ B_b, is that chunk's share of Σ digit · B_digit.
template <class F>
__device__ __forceinline__ void msm_bucket_reduce(const ec_xyzz<F> *sums, const u32 *sum_off,
                                                  const u32 *sum_count, u32 buckets, u32 windows,
                                                  u32 chunk, ec_xyzz<F> *chunk_out)
{
    u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    u32 per_window = buckets / chunk;
    if (t >= windows * per_window)
        return;
    u32 w = t / per_window;
    u32 lo = (t % per_window) * chunk;
    ec_xyzz<F> run = ec_inf<F>();
    ec_xyzz<F> acc = ec_inf<F>();
    for (u32 b = lo + chunk; b-- > lo;) {
        u32 key = w * buckets + b;
        if (sum_count[key] != 0)
            run = ec_add(run, ec_load(sums + sum_off[key]));
        acc = ec_add(acc, run);
    }
    ec_store(chunk_out + t, ec_add(acc, ec_mul_small(run, lo)));
}

// Block b = w·parts + j sums part j of window w's `per_window` chunk
// sums (shared-memory tree) into out[b]. The host runs it twice when a
// window has many chunks: `parts` blocks a window, then one: a single
// block per window would add thousands of points one after the other when
// there are few windows (a table of multiples leaves one to three).
template <class F>
__device__ __forceinline__ void msm_window_sum(const ec_xyzz<F> *chunk_out, u32 per_window,
                                               u32 parts, ec_xyzz<F> *out)
{
    extern __shared__ uint4 msm_shared[];
    ec_xyzz<F> *sh = reinterpret_cast<ec_xyzz<F> *>(msm_shared);
    u32 w = blockIdx.x / parts;
    u32 j = blockIdx.x % parts;
    u32 per_part = (per_window + parts - 1) / parts;
    u32 lo = j * per_part;
    u32 hi = min(per_window, lo + per_part);
    const ec_xyzz<F> *mine = chunk_out + (u64)w * per_window;
    ec_xyzz<F> acc = ec_inf<F>();
    for (u32 i = lo + threadIdx.x; i < hi; i += blockDim.x)
        acc = ec_add(acc, ec_load(mine + i));
    ec_store(sh + threadIdx.x, acc);
    __syncthreads();
    for (u32 s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            ec_store(sh + threadIdx.x, ec_add(ec_load(sh + threadIdx.x), ec_load(sh + threadIdx.x + s)));
        __syncthreads();
    }
    if (threadIdx.x == 0)
        ec_store(out + blockIdx.x, ec_load(sh));
}

// Rows 1.. of a table of multiples: row j holds 2^(shift·j)·P_i for every
// base i of row 0 (the bases, uploaded), `stride` points per row. One
// thread per base; the rows' ZZZ are inverted together (Montgomery's
// trick: one inversion per base). A base at infinity has every multiple
// at infinity (all zeros); any other has none (the group's order is an
// odd prime), so the product of the ZZZs is invertible.
#define MSM_MAX_ROWS 16
template <class F>
__device__ __forceinline__ void msm_precompute(ec_affine<F> *table, u32 stride, u32 shift, u32 rows)
{
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= stride || rows < 2 || rows > MSM_MAX_ROWS)
        return;
    ec_affine<F> p = ec_load(table + i);
    if (ec_is_inf(p)) {
        for (u32 j = 1; j < rows; j++)
            ec_store(table + (u64)j * stride + i, p);
        return;
    }
    ec_xyzz<F> pts[MSM_MAX_ROWS];
    F prefix[MSM_MAX_ROWS];
    ec_xyzz<F> acc = ec_from_affine(p);
    for (u32 j = 1; j < rows; j++) {
        for (u32 k = 0; k < shift; k++)
            acc = ec_dbl(acc);
        pts[j] = acc;
        prefix[j] = j == 1 ? acc.zzz : f_mul(prefix[j - 1], acc.zzz);
    }
    F inv = f_inv(prefix[rows - 1]);
    for (u32 j = rows - 1; j >= 1; j--) {
        F zzz_inv = j == 1 ? inv : f_mul(inv, prefix[j - 1]);
        inv = f_mul(inv, pts[j].zzz);
        ec_store(table + (u64)j * stride + i, ec_to_affine(pts[j], zzz_inv));
    }
}

// The group-dependent steps as kernels for one group: msm_<step>_<G> with
// coordinates in field F (msm_g1.cu: G1 over fp; msm_g2.cu: G2 over fp2),
// one macro per step so a unit can take one of them.
// A group may bound the level-1 kernel's registers (MSM_SEGMENT_BOUNDS,
// defined before this file's instances): the loop is latency-bound, and
// resident warps are what hides it.
#ifndef MSM_SEGMENT_BOUNDS
#define MSM_SEGMENT_BOUNDS
#endif
#define MSM_ACCUMULATE_SEGMENTS_KERNEL(G, F)                                                       \
    extern "C" __global__ void MSM_SEGMENT_BOUNDS msm_accumulate_segments_##G(                     \
        const ec_affine<F> *bases, const u32 *entries, const u32 *bucket_off, u32 keys,           \
        const u32 *part_off, u32 seg, ec_xyzz<F> *out)                                             \
    {                                                                                              \
        msm_accumulate_segments<F>(bases, entries, bucket_off, keys, part_off, seg, out);         \
    }
#define MSM_ACCUMULATE_PARTIALS_KERNEL(G, F)                                                       \
    extern "C" __global__ void msm_accumulate_partials_##G(                                        \
        const ec_xyzz<F> *in, const u32 *in_off, const u32 *in_count, const u32 *task_off,        \
        u32 keys, u32 per_task, ec_xyzz<F> *out)                                                   \
    {                                                                                              \
        msm_accumulate_partials<F>(in, in_off, in_count, task_off, keys, per_task, out);           \
    }
#define MSM_BUCKET_REDUCE_KERNEL(G, F)                                                             \
    extern "C" __global__ void msm_bucket_reduce_##G(const ec_xyzz<F> *sums, const u32 *sum_off,   \
                                                     const u32 *sum_count, u32 buckets,           \
                                                     u32 windows, u32 chunk,                       \
                                                     ec_xyzz<F> *chunk_out)                        \
    {                                                                                              \
        msm_bucket_reduce<F>(sums, sum_off, sum_count, buckets, windows, chunk, chunk_out);        \
    }
#define MSM_WINDOW_SUM_KERNEL(G, F)                                                                \
    extern "C" __global__ void msm_window_sum_##G(const ec_xyzz<F> *chunk_out, u32 per_window,     \
                                                  u32 parts, ec_xyzz<F> *out)                      \
    {                                                                                              \
        msm_window_sum<F>(chunk_out, per_window, parts, out);                                      \
    }
#define MSM_PRECOMPUTE_KERNEL(G, F)                                                                \
    extern "C" __global__ void msm_precompute_##G(ec_affine<F> *table, u32 stride, u32 shift,      \
                                                  u32 rows)                                        \
    {                                                                                              \
        msm_precompute<F>(table, stride, shift, rows);                                             \
    }

// The steps of one group a unit compiles: all of them, or with MSM_ONLY
// the ones it names.
#if !defined(MSM_ONLY)
#define MSM_ONLY_ACCUMULATE_SEGMENTS
#define MSM_ONLY_ACCUMULATE_PARTIALS
#define MSM_ONLY_BUCKET_REDUCE
#define MSM_ONLY_WINDOW_SUM
#define MSM_ONLY_PRECOMPUTE
#endif
