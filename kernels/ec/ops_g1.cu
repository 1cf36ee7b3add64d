// The G1 curve test entry point (see ops.cu).
extern "C" __global__ void g1_ops_test(const ec_affine<fp> *p, const ec_affine<fp> *q,
                                       ec_xyzz<fp> *out,
                                       u32 n)
{
    curve_ops_test<fp>(p, q, out, n);
}
