// Short Weierstrass curves y^2 = x^3 + b (a = 0) over a field F, on the
// device: BLS12-381 G1 (F = fp) and G2 (F = fp2), from one set of formulas.
//
// - ec_affine<F>: blst_p1_affine / blst_p2_affine byte for byte (x, y in
//   Montgomery form); the point at infinity is all zeros, as in blst.
// - ec_xyzz<F>: extended Jacobian "XYZZ" coordinates, x = X/ZZ, y = Y/ZZZ,
//   with ZZ^3 = ZZZ^2. Infinity is ZZ = 0. Bucket accumulators use these:
//   a mixed addition costs 8M + 2S against 7M + 4S for Jacobian, and the
//   formulas need no inversion. The host turns a result into blst's
//   Jacobian coordinates (X·ZZ·ZZZ², Y·ZZ³·ZZZ², ZZ·ZZZ).
//
// The field is reached through the overloaded f_* names of ff/fp.cuh and
// ff/fp2.cuh. The additions and doublings are __noinline__: each inlines
// about fifteen field multiplications, and inlining them into every call
// site made NVRTC spend minutes on a 19 MB module; a call costs a few
// dozen instructions against thousands per addition.
//
// Formulas are the EFD's madd-2008-s, add-2008-s, mdbl-2008-s-1 and
// dbl-2008-s-1 for a = 0 (b does not appear in them), with the exceptional
// cases (P + P, P + (-P), infinity on either side) handled explicitly,
// because bucket sums of real witnesses do meet them (the same base twice
// in one bucket is rare, but P + (-P) happens whenever a digit and its
// negation share a bucket).

#ifndef EC_XYZZ_CUH
#define EC_XYZZ_CUH

template <class F> struct ec_affine {
    F x, y;
};

template <class F> struct ec_xyzz {
    F x, y, zz, zzz;
};

template <class F> __device__ __forceinline__ bool ec_is_inf(const ec_affine<F> &p)
{
    return f_is_zero(p.x) && f_is_zero(p.y);
}

template <class F> __device__ __forceinline__ ec_xyzz<F> ec_inf()
{
    ec_xyzz<F> r;
    r.x = f_one<F>();
    r.y = f_one<F>();
    r.zz = f_zero<F>();
    r.zzz = f_zero<F>();
    return r;
}

template <class F> __device__ __forceinline__ bool ec_is_inf(const ec_xyzz<F> &p)
{
    return f_is_zero(p.zz);
}

template <class F> __device__ __forceinline__ ec_xyzz<F> ec_from_affine(const ec_affine<F> &q)
{
    if (ec_is_inf(q))
        return ec_inf<F>();
    ec_xyzz<F> r;
    r.x = q.x;
    r.y = q.y;
    r.zz = f_one<F>();
    r.zzz = f_one<F>();
    return r;
}

template <class F> __device__ __forceinline__ ec_affine<F> ec_neg(const ec_affine<F> &q)
{
    ec_affine<F> r;
    r.x = q.x;
    r.y = f_neg(q.y);
    return r;
}

template <class F> __device__ __forceinline__ ec_xyzz<F> ec_neg(const ec_xyzz<F> &p)
{
    ec_xyzz<F> r = p;
    r.y = f_neg(p.y);
    return r;
}

// 2 * (x, y) for an affine point (not infinity; y != 0 always holds on
// both groups since they have no point of order 2).
template <class F> __device__ __noinline__ ec_xyzz<F> ec_dbl_affine(const ec_affine<F> &q)
{
    F u = f_dbl(q.y);
    F v = f_sqr(u);
    F w = f_mul(u, v);
    F s = f_mul(q.x, v);
    F xx = f_sqr(q.x);
    F m = f_add(f_dbl(xx), xx);
    ec_xyzz<F> r;
    r.x = f_sub(f_sqr(m), f_dbl(s));
    r.y = f_mul_sub(m, f_sub(s, r.x), w, q.y);
    r.zz = v;
    r.zzz = w;
    return r;
}

template <class F> __device__ __noinline__ ec_xyzz<F> ec_dbl(const ec_xyzz<F> &p)
{
    if (ec_is_inf(p))
        return p;
    F u = f_dbl(p.y);
    F v = f_sqr(u);
    F w = f_mul(u, v);
    F s = f_mul(p.x, v);
    F xx = f_sqr(p.x);
    F m = f_add(f_dbl(xx), xx);
    ec_xyzz<F> r;
    r.x = f_sub(f_sqr(m), f_dbl(s));
    r.y = f_mul_sub(m, f_sub(s, r.x), w, p.y);
    r.zz = f_mul(v, p.zz);
    r.zzz = f_mul(w, p.zzz);
    return r;
}

// p + q, q affine: the body, inlined only where it is the hot loop
// (msm_accumulate_segments); everyone else calls ec_add_affine.
template <class F>
__device__ __forceinline__ ec_xyzz<F> ec_add_affine_inline(const ec_xyzz<F> &p,
                                                           const ec_affine<F> &q)
{
    if (ec_is_inf(q))
        return p;
    if (ec_is_inf(p))
        return ec_from_affine(q);
    // Independent products go in pairs (f_mul_pair): as out-of-line calls
    // (FP_MUL_CALL) one product at a time left the carry chains' latency
    // exposed.
    F u2, s2;
    f_mul_pair(q.x, p.zz, q.y, p.zzz, u2, s2);
    F pp_ = f_sub(u2, p.x);
    F r_ = f_sub(s2, p.y);
    if (f_is_zero(pp_)) {
        if (f_is_zero(r_))
            return ec_dbl_affine(q);
        return ec_inf<F>();
    }
    F pp, rr;
    f_sqr_pair(pp_, r_, pp, rr);
    F ppp, q_;
    f_mul_pair(pp_, pp, p.x, pp, ppp, q_);
    ec_xyzz<F> r;
    f_mul_pair(p.zz, pp, p.zzz, ppp, r.zz, r.zzz);
    r.x = f_sub(f_sub(rr, ppp), f_dbl(q_));
    r.y = f_mul_sub(r_, f_sub(q_, r.x), p.y, ppp);
    return r;
}

template <class F>
__device__ __noinline__ ec_xyzz<F> ec_add_affine(const ec_xyzz<F> &p, const ec_affine<F> &q)
{
    return ec_add_affine_inline(p, q);
}

// p + q, both XYZZ.
template <class F> __device__ __noinline__ ec_xyzz<F> ec_add(const ec_xyzz<F> &p, const ec_xyzz<F> &q)
{
    if (ec_is_inf(q))
        return p;
    if (ec_is_inf(p))
        return q;
    F u1 = f_mul(p.x, q.zz);
    F u2 = f_mul(q.x, p.zz);
    F s1 = f_mul(p.y, q.zzz);
    F s2 = f_mul(q.y, p.zzz);
    F pp_ = f_sub(u2, u1);
    F r_ = f_sub(s2, s1);
    if (f_is_zero(pp_)) {
        if (f_is_zero(r_))
            return ec_dbl(p);
        return ec_inf<F>();
    }
    F pp = f_sqr(pp_);
    F ppp = f_mul(pp_, pp);
    F q_ = f_mul(u1, pp);
    ec_xyzz<F> r;
    r.x = f_sub(f_sub(f_sqr(r_), ppp), f_dbl(q_));
    r.y = f_mul_sub(r_, f_sub(q_, r.x), s1, ppp);
    r.zz = f_mul(f_mul(p.zz, q.zz), pp);
    r.zzz = f_mul(f_mul(p.zzz, q.zzz), ppp);
    return r;
}

template <class F> __device__ __forceinline__ ec_affine<F> ec_load(const ec_affine<F> *p)
{
    ec_affine<F> r;
    r.x = f_load(&p->x);
    r.y = f_load(&p->y);
    return r;
}

template <class F> __device__ __forceinline__ ec_xyzz<F> ec_load(const ec_xyzz<F> *p)
{
    ec_xyzz<F> r;
    r.x = f_load(&p->x);
    r.y = f_load(&p->y);
    r.zz = f_load(&p->zz);
    r.zzz = f_load(&p->zzz);
    return r;
}

// The affine form of p (not infinity) given 1/ZZZ: with λ = ZZZ/ZZ,
// ZZ = λ² and ZZZ = λ³ (ZZ³ = ZZZ² always), so 1/λ = ZZ/ZZZ,
// x = X·(1/λ)² and y = Y/ZZZ.
template <class F>
__device__ __forceinline__ ec_affine<F> ec_to_affine(const ec_xyzz<F> &p, const F &zzz_inv)
{
    F l = f_mul(p.zz, zzz_inv);
    ec_affine<F> r;
    r.x = f_mul(p.x, f_sqr(l));
    r.y = f_mul(p.y, zzz_inv);
    return r;
}

template <class F> __device__ __forceinline__ void ec_store(ec_affine<F> *p, const ec_affine<F> &v)
{
    f_store(&p->x, v.x);
    f_store(&p->y, v.y);
}

template <class F> __device__ __forceinline__ void ec_store(ec_xyzz<F> *p, const ec_xyzz<F> &v)
{
    f_store(&p->x, v.x);
    f_store(&p->y, v.y);
    f_store(&p->zz, v.zz);
    f_store(&p->zzz, v.zzz);
}

#endif // EC_XYZZ_CUH
