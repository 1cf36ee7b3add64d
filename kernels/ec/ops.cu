// Entry points that expose single field and curve operations, so the GPU
// tests can compare each against blstrs on the host (random values and the
// edge cases: 0, 1, p - 1, identity, P + P, P + (-P)).
//
// Units of their own (ops_g1, ops_g2) that only the tests load: the curve
// code is what takes NVRTC time, and a daemon start must not wait for
// entry points it never calls. ops_g1.cu and ops_g2.cu instantiate the
// curve test for their group.

// For each i: out[4i..4i+4] = a*b, a+b, a-b, -a.
template <class F> __device__ __forceinline__ void field_ops_test(const F *a, const F *b, F *out, u32 n)
{
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    F x = f_load(a + i);
    F y = f_load(b + i);
    f_store(out + 4 * i, f_mul(x, y));
    f_store(out + 4 * i + 1, f_add(x, y));
    f_store(out + 4 * i + 2, f_sub(x, y));
    f_store(out + 4 * i + 3, f_neg(x));
}

extern "C" __global__ void fp_ops_test(const fp *a, const fp *b, fp *out, u32 n)
{
    field_ops_test<fp>(a, b, out, n);
}

// For each i with affine p, q: out[4i..4i+4] = p + q (mixed addition),
// 2p + (p + q) (full addition of two points with ZZ != 1), 2p, and
// (p + q) + (-q) (full addition back to p).
template <class F>
__device__ __forceinline__ void curve_ops_test(const ec_affine<F> *p, const ec_affine<F> *q,
                                               ec_xyzz<F> *out, u32 n)
{
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    ec_affine<F> a = ec_load(p + i);
    ec_affine<F> b = ec_load(q + i);
    ec_xyzz<F> pa = ec_from_affine(a);
    ec_xyzz<F> pb = ec_from_affine(b);
    ec_xyzz<F> mixed = ec_add_affine(pa, b);
    ec_store(out + 4 * i, mixed);
    // A full addition whose inputs have ZZ != 1: (2p) + (p + q).
    ec_store(out + 4 * i + 1, ec_add(ec_dbl(pa), mixed));
    ec_store(out + 4 * i + 2, ec_dbl(pa));
    ec_store(out + 4 * i + 3, ec_add(mixed, ec_neg(pb)));
}
