// The G1 curve test entry point (see ops.cu).
extern "C" __global__ void g1_ops_test(const g1_affine *p, const g1_affine *q, g1_xyzz *out,
                                       u32 n)
{
    curve_ops_test<fp>(p, q, out, n);
}
