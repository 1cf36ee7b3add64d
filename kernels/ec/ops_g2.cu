// The Fp2 and G2 test entry points (see ops.cu).
extern "C" __global__ void fp2_ops_test(const fp2 *a, const fp2 *b, fp2 *out, u32 n)
{
    field_ops_test<fp2>(a, b, out, n);
}

extern "C" __global__ void g2_ops_test(const ec_affine<fp2> *p, const ec_affine<fp2> *q,
                                       ec_xyzz<fp2> *out,
                                       u32 n)
{
    curve_ops_test<fp2>(p, q, out, n);
}
