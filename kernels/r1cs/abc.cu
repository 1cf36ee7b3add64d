// a = A.z, b = B.z, c = C.z from a circuit's compiled constraints, on the
// device: the witness z (inputs and aux, in Montgomery form as blstrs lays
// them out) is uploaded once, the matrices stay resident per recording, and
// the results land in the NTT workspace, so a, b, c never cross the bus.
//
// A matrix is compressed sparse rows: row i's terms are row_ptr[i] ..
// row_ptr[i + 1]; a term is a column (an aux index, or an input index with
// bit 31 set) and an index into one table of distinct coefficients whose
// entries 0 and 1 are 1 and -1. Field arithmetic is exact, so any order of
// the sum gives the host's values bit for bit.

// Needs ff/fr.cuh before it in the unit (units are concatenated, so the
// module needs no include path at run time).

#define R1CS_INPUT 0x80000000u
#define R1CS_COEFF_ONE 0u
#define R1CS_COEFF_MINUS_ONE 1u

// Montgomery form of one (R mod r), as blstrs stores Scalar::ONE.
__device__ __forceinline__ bool fr_is_one(fr v)
{
    return v.l[0] == 0x00000001fffffffeULL && v.l[1] == 0x5884b7fa00034802ULL &&
           v.l[2] == 0x998c4fefecbc4ff5ULL && v.l[3] == 0x1824b159acc5056fULL;
}

__device__ __forceinline__ bool fr_is_zero(fr v)
{
    return (v.l[0] | v.l[1] | v.l[2] | v.l[3]) == 0;
}

// One thread a row of one matrix; rows from `rows` to `domain` are the
// domain's zero padding. With `boolean_paths` set, a value of 0 or 1 under
// a coefficient other than +-1 takes no multiplication (most of a hash
// circuit's witness is bits); clear, every such term multiplies (measured
// against each other by `prover bench-abc`).
extern "C" __global__ void r1cs_abc(const u64 *__restrict__ row_ptr,
                                    const u32 *__restrict__ cols,
                                    const u32 *__restrict__ coeffs,
                                    const fr *__restrict__ table,
                                    const fr *__restrict__ inputs,
                                    const fr *__restrict__ aux,
                                    u32 rows,
                                    u32 domain,
                                    u32 boolean_paths,
                                    fr *__restrict__ out)
{
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= domain) {
        return;
    }
    fr acc = {{0, 0, 0, 0}};
    if (i < rows) {
        u64 end = row_ptr[i + 1];
        for (u64 k = row_ptr[i]; k < end; k++) {
            u32 col = cols[k];
            u32 id = coeffs[k];
            fr v = (col & R1CS_INPUT) ? fr_load_ro(&inputs[col & ~R1CS_INPUT])
                                      : fr_load_ro(&aux[col]);
            if (id == R1CS_COEFF_ONE) {
                acc = fr_add(acc, v);
            } else if (id == R1CS_COEFF_MINUS_ONE) {
                acc = fr_sub(acc, v);
            } else if (boolean_paths && fr_is_zero(v)) {
                continue;
            } else if (boolean_paths && fr_is_one(v)) {
                acc = fr_add(acc, fr_load_ro(&table[id]));
            } else {
                acc = fr_add(acc, fr_mul(v, fr_load_ro(&table[id])));
            }
        }
    }
    fr_store(&out[i], acc);
}
