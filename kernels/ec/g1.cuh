// BLS12-381 G1 (y^2 = x^3 + 4 over Fp) on the device.
//
// - g1_affine: blst_p1_affine / blstrs::G1Affine byte for byte (x, y in
//   Montgomery form); the point at infinity is all zeros, as in blst.
// - g1_xyzz: extended Jacobian "XYZZ" coordinates, x = X/ZZ, y = Y/ZZZ,
//   with ZZ^3 = ZZZ^2. Infinity is ZZ = 0. Bucket accumulators use these:
//   a mixed addition costs 8M + 2S against 7M + 4S for Jacobian, and the
//   formulas need no inversion. The host turns a result into blst's
//   Jacobian coordinates (X·ZZ·ZZZ², Y·ZZ³·ZZZ², ZZ·ZZZ).
//
// The additions and doublings are __noinline__: each inlines about fifteen
// field multiplications of ~300 instructions, and inlining them into every
// call site made NVRTC spend minutes on a 19 MB module; a call costs a few
// dozen instructions against thousands per addition.
//
// Formulas are the EFD's madd-2008-s, add-2008-s, mdbl-2008-s-1 and
// dbl-2008-s-1 for a = 0, with the exceptional cases (P + P, P + (-P),
// infinity on either side) handled explicitly, because bucket sums of real
// witnesses do meet them (the same base twice in one bucket is rare, but
// P + (-P) happens whenever a digit and its negation share a bucket).

#ifndef G1_CUH
#define G1_CUH

struct g1_affine {
    fp x, y;
};

struct g1_xyzz {
    fp x, y, zz, zzz;
};

__device__ __forceinline__ bool g1_affine_is_inf(const g1_affine &p)
{
    return fp_is_zero(p.x) && fp_is_zero(p.y);
}

__device__ __forceinline__ g1_xyzz g1_inf()
{
    g1_xyzz r;
    r.x = fp_one();
    r.y = fp_one();
    r.zz = fp_zero();
    r.zzz = fp_zero();
    return r;
}

__device__ __forceinline__ bool g1_is_inf(const g1_xyzz &p)
{
    return fp_is_zero(p.zz);
}

__device__ __forceinline__ g1_xyzz g1_from_affine(const g1_affine &q)
{
    if (g1_affine_is_inf(q))
        return g1_inf();
    g1_xyzz r;
    r.x = q.x;
    r.y = q.y;
    r.zz = fp_one();
    r.zzz = fp_one();
    return r;
}

__device__ __forceinline__ g1_affine g1_affine_neg(const g1_affine &q)
{
    g1_affine r;
    r.x = q.x;
    r.y = fp_neg(q.y);
    return r;
}

__device__ __forceinline__ g1_xyzz g1_neg(const g1_xyzz &p)
{
    g1_xyzz r = p;
    r.y = fp_neg(p.y);
    return r;
}

// 2 * (x, y) for an affine point (not infinity; y != 0 always holds on
// this curve since it has no point of order 2).
__device__ __noinline__ g1_xyzz g1_dbl_affine(const g1_affine &q)
{
    fp u = fp_dbl(q.y);
    fp v = fp_sqr(u);
    fp w = fp_mul(u, v);
    fp s = fp_mul(q.x, v);
    fp xx = fp_sqr(q.x);
    fp m = fp_add(fp_dbl(xx), xx);
    g1_xyzz r;
    r.x = fp_sub(fp_sqr(m), fp_dbl(s));
    r.y = fp_sub(fp_mul(m, fp_sub(s, r.x)), fp_mul(w, q.y));
    r.zz = v;
    r.zzz = w;
    return r;
}

__device__ __noinline__ g1_xyzz g1_dbl(const g1_xyzz &p)
{
    if (g1_is_inf(p))
        return p;
    fp u = fp_dbl(p.y);
    fp v = fp_sqr(u);
    fp w = fp_mul(u, v);
    fp s = fp_mul(p.x, v);
    fp xx = fp_sqr(p.x);
    fp m = fp_add(fp_dbl(xx), xx);
    g1_xyzz r;
    r.x = fp_sub(fp_sqr(m), fp_dbl(s));
    r.y = fp_sub(fp_mul(m, fp_sub(s, r.x)), fp_mul(w, p.y));
    r.zz = fp_mul(v, p.zz);
    r.zzz = fp_mul(w, p.zzz);
    return r;
}

// p + q, q affine: the body, inlined only where it is the hot loop
// (msm_accumulate_bases); everyone else calls g1_add_affine.
__device__ __forceinline__ g1_xyzz g1_add_affine_inline(const g1_xyzz &p, const g1_affine &q)
{
    if (g1_affine_is_inf(q))
        return p;
    if (g1_is_inf(p))
        return g1_from_affine(q);
    fp u2 = fp_mul(q.x, p.zz);
    fp s2 = fp_mul(q.y, p.zzz);
    fp pp_ = fp_sub(u2, p.x);
    fp r_ = fp_sub(s2, p.y);
    if (fp_is_zero(pp_)) {
        if (fp_is_zero(r_))
            return g1_dbl_affine(q);
        return g1_inf();
    }
    fp pp = fp_sqr(pp_);
    fp ppp = fp_mul(pp_, pp);
    fp q_ = fp_mul(p.x, pp);
    g1_xyzz r;
    r.x = fp_sub(fp_sub(fp_sqr(r_), ppp), fp_dbl(q_));
    r.y = fp_sub(fp_mul(r_, fp_sub(q_, r.x)), fp_mul(p.y, ppp));
    r.zz = fp_mul(p.zz, pp);
    r.zzz = fp_mul(p.zzz, ppp);
    return r;
}

__device__ __noinline__ g1_xyzz g1_add_affine(const g1_xyzz &p, const g1_affine &q)
{
    return g1_add_affine_inline(p, q);
}

// p + q, both XYZZ.
__device__ __noinline__ g1_xyzz g1_add(const g1_xyzz &p, const g1_xyzz &q)
{
    if (g1_is_inf(q))
        return p;
    if (g1_is_inf(p))
        return q;
    fp u1 = fp_mul(p.x, q.zz);
    fp u2 = fp_mul(q.x, p.zz);
    fp s1 = fp_mul(p.y, q.zzz);
    fp s2 = fp_mul(q.y, p.zzz);
    fp pp_ = fp_sub(u2, u1);
    fp r_ = fp_sub(s2, s1);
    if (fp_is_zero(pp_)) {
        if (fp_is_zero(r_))
            return g1_dbl(p);
        return g1_inf();
    }
    fp pp = fp_sqr(pp_);
    fp ppp = fp_mul(pp_, pp);
    fp q_ = fp_mul(u1, pp);
    g1_xyzz r;
    r.x = fp_sub(fp_sub(fp_sqr(r_), ppp), fp_dbl(q_));
    r.y = fp_sub(fp_mul(r_, fp_sub(q_, r.x)), fp_mul(s1, ppp));
    r.zz = fp_mul(fp_mul(p.zz, q.zz), pp);
    r.zzz = fp_mul(fp_mul(p.zzz, q.zzz), ppp);
    return r;
}

__device__ __forceinline__ g1_affine g1_affine_load(const g1_affine *p)
{
    g1_affine r;
    r.x = fp_load(&p->x);
    r.y = fp_load(&p->y);
    return r;
}

__device__ __forceinline__ g1_xyzz g1_load(const g1_xyzz *p)
{
    g1_xyzz r;
    r.x = fp_load(&p->x);
    r.y = fp_load(&p->y);
    r.zz = fp_load(&p->zz);
    r.zzz = fp_load(&p->zzz);
    return r;
}

__device__ __forceinline__ void g1_store(g1_xyzz *p, const g1_xyzz &v)
{
    fp_store(&p->x, v.x);
    fp_store(&p->y, v.y);
    fp_store(&p->zz, v.zz);
    fp_store(&p->zzz, v.zzz);
}

#endif // G1_CUH
