// Fp2 = Fp[u] / (u^2 + 1), the field of G2's coordinates.
//
// Layout matches blstrs::Fp2 / blst_fp2: c0 then c1, each an fp of
// ff/fp.cuh (Montgomery form, fully reduced), 96 bytes.
//
// The multiplication and squaring are __noinline__: a G2 addition makes
// about ten of them, each three (or two) 384-bit Montgomery products of
// ~600 instructions; inlined into every caller they would multiply the
// module's size and NVRTC's time. The unit of the G2 bucket sums (the
// MSM's hot loop, compiled on its own) defines FP2_INLINE: there a call
// passes every operand through the stack (1.5 KB a thread) and runs the
// three independent products of a Karatsuba multiplication one after the
// other, where inlined the scheduler interleaves them.
//
// Needs ff/fp.cuh (compiled before this file).

#ifndef FP2_CUH
#define FP2_CUH

#ifdef FP2_INLINE
#define FP2_OP __forceinline__
#else
#define FP2_OP __noinline__
#endif

struct fp2 {
    fp c0, c1;
};

__device__ __forceinline__ fp2 fp2_make(const fp &c0, const fp &c1)
{
    fp2 r;
    r.c0 = c0;
    r.c1 = c1;
    return r;
}

template <> __device__ __forceinline__ fp2 f_zero<fp2>() { return fp2_make(fp_zero(), fp_zero()); }
template <> __device__ __forceinline__ fp2 f_one<fp2>() { return fp2_make(fp_one(), fp_zero()); }

__device__ __forceinline__ bool f_is_zero(const fp2 &a)
{
    return fp_is_zero(a.c0) && fp_is_zero(a.c1);
}

__device__ __forceinline__ fp2 f_add(const fp2 &a, const fp2 &b)
{
    return fp2_make(fp_add(a.c0, b.c0), fp_add(a.c1, b.c1));
}

__device__ __forceinline__ fp2 f_sub(const fp2 &a, const fp2 &b)
{
    return fp2_make(fp_sub(a.c0, b.c0), fp_sub(a.c1, b.c1));
}

__device__ __forceinline__ fp2 f_dbl(const fp2 &a)
{
    return fp2_make(fp_dbl(a.c0), fp_dbl(a.c1));
}

__device__ __forceinline__ fp2 f_neg(const fp2 &a)
{
    return fp2_make(fp_neg(a.c0), fp_neg(a.c1));
}

// (a0 + a1 u)(b0 + b1 u) = (a0 b0 - a1 b1) + ((a0 + a1)(b0 + b1) - a0 b0 - a1 b1) u:
// three products instead of four (Karatsuba).
__device__ FP2_OP fp2 f_mul(const fp2 &a, const fp2 &b)
{
    fp t0 = FP_CURVE_MUL(a.c0, b.c0);
    fp t1 = FP_CURVE_MUL(a.c1, b.c1);
    fp t2 = FP_CURVE_MUL(fp_add(a.c0, a.c1), fp_add(b.c0, b.c1));
    return fp2_make(fp_sub(t0, t1), fp_sub(fp_sub(t2, t0), t1));
}

// (a0 + a1 u)^2 = (a0 + a1)(a0 - a1) + 2 a0 a1 u: two products.
__device__ FP2_OP fp2 f_sqr(const fp2 &a)
{
    fp t = FP_CURVE_MUL(a.c0, a.c1);
    return fp2_make(FP_CURVE_MUL(fp_add(a.c0, a.c1), fp_sub(a.c0, a.c1)), fp_dbl(t));
}

// a * b - c * d (the XYZZ formulas' Y3). Over Fp it shares one reduction
// (fp_mul2); here the two Karatsuba products stay separate.
__device__ __forceinline__ fp2 f_mul_sub(const fp2 &a, const fp2 &b, const fp2 &c, const fp2 &d)
{
    return f_sub(f_mul(a, b), f_mul(c, d));
}

// x = a * b and y = c * d (inlined or not, each Fp2 product already has
// three independent Fp products to interleave).
__device__ __forceinline__ void f_mul_pair(const fp2 &a, const fp2 &b, const fp2 &c, const fp2 &d,
                                           fp2 &x, fp2 &y)
{
    x = f_mul(a, b);
    y = f_mul(c, d);
}

// x = a^2 and y = c^2: two products each instead of Karatsuba's three.
__device__ __forceinline__ void f_sqr_pair(const fp2 &a, const fp2 &c, fp2 &x, fp2 &y)
{
    x = f_sqr(a);
    y = f_sqr(c);
}

// 1 / (a0 + a1 u) = (a0 - a1 u) / (a0^2 + a1^2), since u^2 = -1.
__device__ __noinline__ fp2 f_inv(const fp2 &a)
{
    fp t = fp_inv(fp_add(fp_sqr(a.c0), fp_sqr(a.c1)));
    return fp2_make(fp_mul(a.c0, t), fp_neg(fp_mul(a.c1, t)));
}

__device__ __forceinline__ fp2 f_load(const fp2 *p)
{
    return fp2_make(fp_load(&p->c0), fp_load(&p->c1));
}

__device__ __forceinline__ void f_store(fp2 *p, const fp2 &v)
{
    fp_store(&p->c0, v.c0);
    fp_store(&p->c1, v.c1);
}

#endif // FP2_CUH
