// Entry points that expose single field and curve operations, so the GPU
// tests can compare each against blstrs on the host (random values and the
// edge cases: 0, 1, p - 1, identity, P + P, P + (-P)).
//
// Part of the msm unit (after ff/fr.cuh, ff/fp.cuh and ec/g1.cuh): the
// curve code is what takes NVRTC time, and a separate unit would compile
// it a second time.

// For each i: out[4i..4i+4] = a*b, a+b, a-b, -a.
extern "C" __global__ void fp_ops_test(const fp *a, const fp *b, fp *out, u32 n)
{
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    fp x = fp_load(a + i);
    fp y = fp_load(b + i);
    fp_store(out + 4 * i, fp_mul(x, y));
    fp_store(out + 4 * i + 1, fp_add(x, y));
    fp_store(out + 4 * i + 2, fp_sub(x, y));
    fp_store(out + 4 * i + 3, fp_neg(x));
}

// For each i with affine p, q: out[4i..4i+4] = p + q (mixed addition),
// 2p + (p + q) (full addition of two points with ZZ != 1), 2p, and
// (p + q) + (-q) (full addition back to p).
extern "C" __global__ void g1_ops_test(const g1_affine *p, const g1_affine *q, g1_xyzz *out,
                                       u32 n)
{
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    g1_affine a = g1_affine_load(p + i);
    g1_affine b = g1_affine_load(q + i);
    g1_xyzz pa = g1_from_affine(a);
    g1_xyzz pb = g1_from_affine(b);
    g1_xyzz mixed = g1_add_affine(pa, b);
    g1_store(out + 4 * i, mixed);
    // A full addition whose inputs have ZZ != 1: (2p) + (p + q).
    g1_store(out + 4 * i + 1, g1_add(g1_dbl(pa), mixed));
    g1_store(out + 4 * i + 2, g1_dbl(pa));
    g1_store(out + 4 * i + 3, g1_add(mixed, g1_neg(pb)));
}
