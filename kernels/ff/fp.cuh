// Montgomery arithmetic in the BLS12-381 base field Fp.
//
// Layout matches blstrs::Fp / blst_fp byte for byte: twelve little-endian
// 32-bit words (blst's six 64-bit limbs, split) holding a*R mod p with
// R = 2^384, always fully reduced (< p). Canonical values are what let the
// host take device points as they are (blstrs assumes reduced limbs).
//
// The multiplication follows ff/fr.cuh: 32-bit words, partial products
// split by column parity into two independent carry chains (E holds the
// even columns, O the odd ones), Montgomery reduction interleaved row by
// row. With twelve words one chain would not fit one asm statement's
// operand limit, so each instruction is its own `asm volatile` statement:
// volatile keeps them in program order, which is what the carry flag
// between them needs (nothing else touches the flag in between: only
// register moves separate them after unrolling).
//
// Bounds: p < 2^381, so a + b < 2^382 needs no carry word, and the running
// sum of the multiplication stays below 2p * 2^32 < 2^414 (13 words), so
// the O chain never carries out of its top word.
//
// Needs the u32/u64 typedefs of ff/fr.cuh (compiled before this file).

#ifndef FP_CUH
#define FP_CUH

#define FP_WORDS 12

struct fp {
    u32 w[FP_WORDS];
};

// p = 0x1a0111ea397fe69a4b1ba7b6434bacd764774b84f38512bf
//       6730d2a0f6b0f6241eabfffeb153ffffb9feffffffffaaab
#define FP_W0 0xffffaaabu
#define FP_W1 0xb9feffffu
#define FP_W2 0xb153ffffu
#define FP_W3 0x1eabfffeu
#define FP_W4 0xf6b0f624u
#define FP_W5 0x6730d2a0u
#define FP_W6 0xf38512bfu
#define FP_W7 0x64774b84u
#define FP_W8 0x434bacd7u
#define FP_W9 0x4b1ba7b6u
#define FP_W10 0x397fe69au
#define FP_W11 0x1a0111eau
// -p^-1 mod 2^32
#define FP_INV 0xfffcfffdu

// R mod p (Montgomery one), the same twelve-word order.
#define FP_ONE0 0x0002fffdu
#define FP_ONE1 0x76090000u
#define FP_ONE2 0xc40c0002u
#define FP_ONE3 0xebf4000bu
#define FP_ONE4 0x53c758bau
#define FP_ONE5 0x5f489857u
#define FP_ONE6 0x70525745u
#define FP_ONE7 0x77ce5853u
#define FP_ONE8 0xa256ec6du
#define FP_ONE9 0x5c071a97u
#define FP_ONE10 0xfa80e493u
#define FP_ONE11 0x15f65ec3u

// Word i of p; i is a constant after unrolling, so this folds to an immediate.
__device__ __forceinline__ u32 fp_p(int i)
{
    switch (i) {
    case 0: return FP_W0;
    case 1: return FP_W1;
    case 2: return FP_W2;
    case 3: return FP_W3;
    case 4: return FP_W4;
    case 5: return FP_W5;
    case 6: return FP_W6;
    case 7: return FP_W7;
    case 8: return FP_W8;
    case 9: return FP_W9;
    case 10: return FP_W10;
    default: return FP_W11;
    }
}

__device__ __forceinline__ u32 fp_one_word(int i)
{
    switch (i) {
    case 0: return FP_ONE0;
    case 1: return FP_ONE1;
    case 2: return FP_ONE2;
    case 3: return FP_ONE3;
    case 4: return FP_ONE4;
    case 5: return FP_ONE5;
    case 6: return FP_ONE6;
    case 7: return FP_ONE7;
    case 8: return FP_ONE8;
    case 9: return FP_ONE9;
    case 10: return FP_ONE10;
    default: return FP_ONE11;
    }
}

__device__ __forceinline__ fp fp_zero()
{
    fp z;
#pragma unroll
    for (int i = 0; i < FP_WORDS; i++)
        z.w[i] = 0;
    return z;
}

__device__ __forceinline__ fp fp_one()
{
    fp z;
#pragma unroll
    for (int i = 0; i < FP_WORDS; i++)
        z.w[i] = fp_one_word(i);
    return z;
}

__device__ __forceinline__ bool fp_is_zero(const fp &a)
{
    u32 acc = 0;
#pragma unroll
    for (int i = 0; i < FP_WORDS; i++)
        acc |= a.w[i];
    return acc == 0;
}

__device__ __forceinline__ bool fp_eq(const fp &a, const fp &b)
{
    u32 acc = 0;
#pragma unroll
    for (int i = 0; i < FP_WORDS; i++)
        acc |= a.w[i] ^ b.w[i];
    return acc == 0;
}

// x - p when x >= p; x < 2p on entry (no carry word).
__device__ __forceinline__ fp fp_reduce_once(const fp &x)
{
    fp d;
    u32 borrow;
    asm volatile("sub.cc.u32 %0, %1, %2;" : "=r"(d.w[0]) : "r"(x.w[0]), "n"(FP_W0));
#pragma unroll
    for (int i = 1; i < FP_WORDS; i++)
        asm volatile("subc.cc.u32 %0, %1, %2;" : "=r"(d.w[i]) : "r"(x.w[i]), "r"(fp_p(i)));
    asm volatile("subc.u32 %0, 0, 0;" : "=r"(borrow));
    // borrow is all ones when x < p: keep x.
    fp out;
#pragma unroll
    for (int i = 0; i < FP_WORDS; i++)
        out.w[i] = borrow ? x.w[i] : d.w[i];
    return out;
}

__device__ __forceinline__ fp fp_add(const fp &a, const fp &b)
{
    fp s;
    asm volatile("add.cc.u32 %0, %1, %2;" : "=r"(s.w[0]) : "r"(a.w[0]), "r"(b.w[0]));
#pragma unroll
    for (int i = 1; i < FP_WORDS - 1; i++)
        asm volatile("addc.cc.u32 %0, %1, %2;" : "=r"(s.w[i]) : "r"(a.w[i]), "r"(b.w[i]));
    asm volatile("addc.u32 %0, %1, %2;"
                 : "=r"(s.w[FP_WORDS - 1])
                 : "r"(a.w[FP_WORDS - 1]), "r"(b.w[FP_WORDS - 1]));
    return fp_reduce_once(s);
}

__device__ __forceinline__ fp fp_sub(const fp &a, const fp &b)
{
    fp d;
    u32 borrow;
    asm volatile("sub.cc.u32 %0, %1, %2;" : "=r"(d.w[0]) : "r"(a.w[0]), "r"(b.w[0]));
#pragma unroll
    for (int i = 1; i < FP_WORDS; i++)
        asm volatile("subc.cc.u32 %0, %1, %2;" : "=r"(d.w[i]) : "r"(a.w[i]), "r"(b.w[i]));
    asm volatile("subc.u32 %0, 0, 0;" : "=r"(borrow));
    // On borrow add p back (masked: no branch).
    fp out;
    asm volatile("add.cc.u32 %0, %1, %2;" : "=r"(out.w[0]) : "r"(d.w[0]), "r"(FP_W0 & borrow));
#pragma unroll
    for (int i = 1; i < FP_WORDS - 1; i++)
        asm volatile("addc.cc.u32 %0, %1, %2;"
                     : "=r"(out.w[i])
                     : "r"(d.w[i]), "r"(fp_p(i) & borrow));
    asm volatile("addc.u32 %0, %1, %2;"
                 : "=r"(out.w[FP_WORDS - 1])
                 : "r"(d.w[FP_WORDS - 1]), "r"(FP_W11 & borrow));
    return out;
}

__device__ __forceinline__ fp fp_dbl(const fp &a)
{
    return fp_add(a, a);
}

// -a (0 stays 0, so the result is canonical).
__device__ __forceinline__ fp fp_neg(const fp &a)
{
    fp z = fp_zero();
    return fp_sub(z, a);
}

// First row: E = a_even * b, O = a_odd * b (disjoint slots, no carries).
__device__ __forceinline__ void fp_mul_first(u32 e[FP_WORDS], u32 o[FP_WORDS],
                                             const u32 a[FP_WORDS], u32 b)
{
#pragma unroll
    for (int j = 0; j < FP_WORDS; j += 2) {
        asm("mul.lo.u32 %0, %2, %3;\n\t"
            "mul.hi.u32 %1, %2, %3;"
            : "=r"(e[j]), "=r"(e[j + 1])
            : "r"(a[j]), "r"(b));
        asm("mul.lo.u32 %0, %2, %3;\n\t"
            "mul.hi.u32 %1, %2, %3;"
            : "=r"(o[j]), "=r"(o[j + 1])
            : "r"(a[j + 1]), "r"(b));
    }
}

// x += a_even * b: a[j] * b for even j into the word pairs (j, j + 1) of
// x, one carry chain, its top carry into `top` (the word above x[11]).
__device__ __forceinline__ void fp_mul_add_even(u32 x[FP_WORDS], u32 &top, const u32 a[FP_WORDS],
                                                u32 b)
{
    asm volatile("mad.lo.cc.u32 %0, %1, %2, %0;" : "+r"(x[0]) : "r"(a[0]), "r"(b));
    asm volatile("madc.hi.cc.u32 %0, %1, %2, %0;" : "+r"(x[1]) : "r"(a[0]), "r"(b));
#pragma unroll
    for (int j = 2; j < FP_WORDS; j += 2) {
        asm volatile("madc.lo.cc.u32 %0, %1, %2, %0;" : "+r"(x[j]) : "r"(a[j]), "r"(b));
        asm volatile("madc.hi.cc.u32 %0, %1, %2, %0;" : "+r"(x[j + 1]) : "r"(a[j]), "r"(b));
    }
    asm volatile("addc.u32 %0, %0, 0;" : "+r"(top));
}

// Shift by one word and add a * b (see ff/fr.cuh, fr_mul_next): E' = O
// with E[1] added into its lowest word (that carry feeds O''s chain),
// O' = E[2..] + a_odd * b, then E' += a_even * b with its top carry into O'.
__device__ __forceinline__ void fp_mul_next(u32 e[FP_WORDS], u32 o[FP_WORDS],
                                            const u32 a[FP_WORDS], u32 b)
{
    u32 n[FP_WORDS];
    asm volatile("add.cc.u32 %0, %0, %1;" : "+r"(o[0]) : "r"(e[1]));
#pragma unroll
    for (int t = 0; t < FP_WORDS / 2; t++) {
        u32 lo_in = (2 * t + 2 < FP_WORDS) ? e[2 * t + 2] : 0;
        u32 hi_in = (2 * t + 3 < FP_WORDS) ? e[2 * t + 3] : 0;
        asm volatile("madc.lo.cc.u32 %0, %1, %2, %3;"
                     : "=r"(n[2 * t])
                     : "r"(a[2 * t + 1]), "r"(b), "r"(lo_in));
        if (2 * t + 1 < FP_WORDS - 1)
            asm volatile("madc.hi.cc.u32 %0, %1, %2, %3;"
                         : "=r"(n[2 * t + 1])
                         : "r"(a[2 * t + 1]), "r"(b), "r"(hi_in));
        else
            asm volatile("madc.hi.u32 %0, %1, %2, %3;"
                         : "=r"(n[2 * t + 1])
                         : "r"(a[2 * t + 1]), "r"(b), "r"(hi_in));
    }
    fp_mul_add_even(o, n[FP_WORDS - 1], a, b);
#pragma unroll
    for (int w = 0; w < FP_WORDS; w++) {
        e[w] = o[w];
        o[w] = n[w];
    }
}

// The row's reduction: add m * p with m = E[0] * (-p^-1), so column 0
// becomes zero. Odd words of p go into O's chain, even words into E's,
// whose top carry lands in O's top word (column 12).
__device__ __forceinline__ void fp_mul_reduce(u32 e[FP_WORDS], u32 o[FP_WORDS])
{
    u32 m = e[0] * FP_INV;
    asm volatile("mad.lo.cc.u32 %0, %1, %2, %0;" : "+r"(o[0]) : "r"(m), "n"(FP_W1));
    asm volatile("madc.hi.cc.u32 %0, %1, %2, %0;" : "+r"(o[1]) : "r"(m), "n"(FP_W1));
#pragma unroll
    for (int j = 3; j < FP_WORDS; j += 2) {
        asm volatile("madc.lo.cc.u32 %0, %1, %2, %0;" : "+r"(o[j - 1]) : "r"(m), "r"(fp_p(j)));
        if (j < FP_WORDS - 1)
            asm volatile("madc.hi.cc.u32 %0, %1, %2, %0;" : "+r"(o[j]) : "r"(m), "r"(fp_p(j)));
        else
            asm volatile("madc.hi.u32 %0, %1, %2, %0;" : "+r"(o[j]) : "r"(m), "r"(fp_p(j)));
    }
    asm volatile("mad.lo.cc.u32 %0, %1, %2, %0;" : "+r"(e[0]) : "r"(m), "n"(FP_W0));
    asm volatile("madc.hi.cc.u32 %0, %1, %2, %0;" : "+r"(e[1]) : "r"(m), "n"(FP_W0));
#pragma unroll
    for (int j = 2; j < FP_WORDS; j += 2) {
        asm volatile("madc.lo.cc.u32 %0, %1, %2, %0;" : "+r"(e[j]) : "r"(m), "r"(fp_p(j)));
        asm volatile("madc.hi.cc.u32 %0, %1, %2, %0;" : "+r"(e[j + 1]) : "r"(m), "r"(fp_p(j)));
    }
    asm volatile("addc.u32 %0, %0, 0;" : "+r"(o[FP_WORDS - 1]));
}

// After the last row: the value O + E[1..] as twelve words (the final
// shift by one word), not yet reduced.
__device__ __forceinline__ fp fp_mul_shift(const u32 e[FP_WORDS], const u32 o[FP_WORDS])
{
    fp t;
    asm volatile("add.cc.u32 %0, %1, %2;" : "=r"(t.w[0]) : "r"(o[0]), "r"(e[1]));
#pragma unroll
    for (int w = 1; w < FP_WORDS - 1; w++)
        asm volatile("addc.cc.u32 %0, %1, %2;" : "=r"(t.w[w]) : "r"(o[w]), "r"(e[w + 1]));
    asm volatile("addc.u32 %0, %1, 0;" : "=r"(t.w[FP_WORDS - 1]) : "r"(o[FP_WORDS - 1]));
    return t;
}

// a * b * R^-1 mod p (Montgomery product), canonical output.
__device__ __forceinline__ fp fp_mul(const fp &x, const fp &y)
{
    u32 e[FP_WORDS], o[FP_WORDS];
    fp_mul_first(e, o, x.w, y.w[0]);
    fp_mul_reduce(e, o);
#pragma unroll
    for (int i = 1; i < FP_WORDS; i++) {
        fp_mul_next(e, o, x.w, y.w[i]);
        fp_mul_reduce(e, o);
    }
    // The result is < 2p: one subtraction.
    return fp_reduce_once(fp_mul_shift(e, o));
}

__device__ __forceinline__ fp fp_sqr(const fp &x)
{
    return fp_mul(x, x);
}

// Adds a * b into the row without moving to the next word: E += a_even * b
// at columns (0,1), (2,3), ..., O += a_odd * b at columns (1,2), ... (O[w]
// is column w + 1), E's top carry into O's top word. For a second product
// in the same rows (fp_mul2); the bound of the running sum is checked there.
__device__ __forceinline__ void fp_mul_acc(u32 e[FP_WORDS], u32 o[FP_WORDS],
                                           const u32 a[FP_WORDS], u32 b)
{
    asm volatile("mad.lo.cc.u32 %0, %1, %2, %0;" : "+r"(o[0]) : "r"(a[1]), "r"(b));
    asm volatile("madc.hi.cc.u32 %0, %1, %2, %0;" : "+r"(o[1]) : "r"(a[1]), "r"(b));
#pragma unroll
    for (int j = 2; j < FP_WORDS; j += 2) {
        asm volatile("madc.lo.cc.u32 %0, %1, %2, %0;" : "+r"(o[j]) : "r"(a[j + 1]), "r"(b));
        if (j + 1 < FP_WORDS - 1)
            asm volatile("madc.hi.cc.u32 %0, %1, %2, %0;" : "+r"(o[j + 1]) : "r"(a[j + 1]), "r"(b));
        else
            asm volatile("madc.hi.u32 %0, %1, %2, %0;" : "+r"(o[j + 1]) : "r"(a[j + 1]), "r"(b));
    }
    fp_mul_add_even(e, o[FP_WORDS - 1], a, b);
}

// (a * b + c * d) * R^-1 mod p with one Montgomery reduction for both
// products: each row adds a * b_i and c * d_i, then reduces once. The
// reduction is half of a product's IMADs, and the XYZZ formulas' Y3 is
// such a sum (a difference, with -d for d). Bound: with the running sum
// T < 3p after a row, the next row's T + a*b_i + c*d_i + m*p < 3p + 4p *
// 2^32 < 2^416 fits the thirteen words E and O span (every term is added
// into a total under that bound, so no chain carries out of its top
// word), and the new T < 3p again. The result is < 3p: two conditional
// subtractions make it canonical.
__device__ __forceinline__ fp fp_mul2(const fp &a, const fp &b, const fp &c, const fp &d)
{
    u32 e[FP_WORDS], o[FP_WORDS];
    fp_mul_first(e, o, a.w, b.w[0]);
    fp_mul_acc(e, o, c.w, d.w[0]);
    fp_mul_reduce(e, o);
#pragma unroll
    for (int i = 1; i < FP_WORDS; i++) {
        fp_mul_next(e, o, a.w, b.w[i]);
        fp_mul_acc(e, o, c.w, d.w[i]);
        fp_mul_reduce(e, o);
    }
    return fp_reduce_once(fp_reduce_once(fp_mul_shift(e, o)));
}

// a * b - c * d.
__device__ __forceinline__ fp fp_mul_sub(const fp &a, const fp &b, const fp &c, const fp &d)
{
    return fp_mul2(a, b, c, fp_neg(d));
}

// Loads and stores of 48 bytes as three 16-byte accesses (the layout's
// alignment is 16 in every buffer the host allocates).
__device__ __forceinline__ fp fp_load(const fp *p)
{
    const uint4 *q = reinterpret_cast<const uint4 *>(p);
    fp out;
#pragma unroll
    for (int k = 0; k < 3; k++) {
        uint4 v = q[k];
        out.w[4 * k] = v.x;
        out.w[4 * k + 1] = v.y;
        out.w[4 * k + 2] = v.z;
        out.w[4 * k + 3] = v.w;
    }
    return out;
}

__device__ __forceinline__ void fp_store(fp *p, const fp &v)
{
    uint4 *q = reinterpret_cast<uint4 *>(p);
#pragma unroll
    for (int k = 0; k < 3; k++)
        q[k] = make_uint4(v.w[4 * k], v.w[4 * k + 1], v.w[4 * k + 2], v.w[4 * k + 3]);
}

// a^(p-2) = a^-1 (Fermat; 0 maps to 0). Only the precomputation of base
// multiples inverts, once per base, so a rolled square-and-multiply loop
// (about 570 products) is enough.
__device__ __noinline__ fp fp_inv(const fp &a)
{
    fp r = fp_one();
#pragma unroll 1
    for (int i = FP_WORDS - 1; i >= 0; i--) {
        u32 e = i == 0 ? FP_W0 - 2 : fp_p(i);
#pragma unroll 1
        for (int b = 31; b >= 0; b--) {
            r = fp_sqr(r);
            if ((e >> b) & 1)
                r = fp_mul(r, a);
        }
    }
    return r;
}

// Two independent products, for the scheduler to interleave.
struct fp_pair {
    fp x, y;
};

__device__ __forceinline__ fp_pair fp_mul_pair(const fp &a, const fp &b, const fp &c, const fp &d)
{
    fp_pair r;
    r.x = fp_mul(a, b);
    r.y = fp_mul(c, d);
    return r;
}

// The products the curve formulas make (f_mul, f_sqr, f_mul_sub, and
// Fp2's through them). Inlined, a mixed addition is ~8000 instructions of
// straight code (128 KB), more than the instruction caches hold: profiled
// on the H200, the G1 bucket sums then spent 38 % of their cycles waiting
// for instructions. A unit that defines FP_MUL_CALL (the MSM's hot loops)
// calls them out of line instead, operands and result in registers (no
// stack frame: the arguments are values, not references).
#ifdef FP_MUL_CALL
__device__ __noinline__ fp fp_mul_call(fp a, fp b) { return fp_mul(a, b); }
__device__ __noinline__ fp_pair fp_mul_pair_call(fp a, fp b, fp c, fp d)
{
    return fp_mul_pair(a, b, c, d);
}
__device__ __noinline__ fp fp_mul_sub_call(fp a, fp b, fp c, fp d)
{
    return fp_mul_sub(a, b, c, d);
}
#define FP_CURVE_MUL fp_mul_call
#define FP_CURVE_MUL_PAIR fp_mul_pair_call
#define FP_CURVE_MUL_SUB fp_mul_sub_call
#else
#define FP_CURVE_MUL fp_mul
#define FP_CURVE_MUL_PAIR fp_mul_pair
#define FP_CURVE_MUL_SUB fp_mul_sub
#endif

// The names the curve templates of ec/xyzz.cuh call, for Fp (ff/fp2.cuh
// gives the same names for Fp2), so each curve formula is written once.
template <class F> __device__ F f_zero();
template <class F> __device__ F f_one();
template <> __device__ __forceinline__ fp f_zero<fp>() { return fp_zero(); }
template <> __device__ __forceinline__ fp f_one<fp>() { return fp_one(); }
__device__ __forceinline__ bool f_is_zero(const fp &a) { return fp_is_zero(a); }
__device__ __forceinline__ fp f_add(const fp &a, const fp &b) { return fp_add(a, b); }
__device__ __forceinline__ fp f_sub(const fp &a, const fp &b) { return fp_sub(a, b); }
__device__ __forceinline__ fp f_dbl(const fp &a) { return fp_dbl(a); }
__device__ __forceinline__ fp f_neg(const fp &a) { return fp_neg(a); }
__device__ __forceinline__ fp f_mul(const fp &a, const fp &b) { return FP_CURVE_MUL(a, b); }
__device__ __forceinline__ fp f_sqr(const fp &a) { return FP_CURVE_MUL(a, a); }
__device__ __forceinline__ fp f_mul_sub(const fp &a, const fp &b, const fp &c, const fp &d)
{
    return FP_CURVE_MUL_SUB(a, b, c, d);
}
// x = a * b and y = c * d.
__device__ __forceinline__ void f_mul_pair(const fp &a, const fp &b, const fp &c, const fp &d, fp &x,
                                           fp &y)
{
    fp_pair r = FP_CURVE_MUL_PAIR(a, b, c, d);
    x = r.x;
    y = r.y;
}
// x = a^2 and y = c^2: over Fp a square is a product (Fp2 squares are
// cheaper than its products, so the formulas say which they mean).
__device__ __forceinline__ void f_sqr_pair(const fp &a, const fp &c, fp &x, fp &y)
{
    f_mul_pair(a, a, c, c, x, y);
}
__device__ __forceinline__ fp f_inv(const fp &a) { return fp_inv(a); }
__device__ __forceinline__ fp f_load(const fp *p) { return fp_load(p); }
__device__ __forceinline__ void f_store(fp *p, const fp &v) { fp_store(p, v); }

#endif // FP_CUH
