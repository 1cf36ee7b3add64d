// Coefficient-wise steps of the quotient between the transforms.
//
// Compiled after ff/fr.cuh. On the coset g*H the vanishing polynomial
// Z(x) = x^n - 1 takes the single value g^n - 1, so dividing by Z is a
// multiplication by one constant, fused here with a*b - c.

// a[i] = (a[i] * b[i] - c[i]) * z_inv over the whole domain.
extern "C" __global__ void mul_sub_div_z(fr *__restrict__ a, const fr *__restrict__ b,
                                         const fr *__restrict__ c, const fr *__restrict__ z_inv,
                                         u32 n)
{
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    fr ab = fr_mul(fr_load(a + i), fr_load(b + i));
    fr_store(a + i, fr_mul(fr_sub(ab, fr_load(c + i)), fr_load_ro(z_inv)));
}
