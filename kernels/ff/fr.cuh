// Montgomery arithmetic in the BLS12-381 scalar field Fr.
//
// Layout matches blstrs::Scalar / blst_fr byte for byte: four little-endian
// 64-bit limbs holding a*R mod r with R = 2^256, always fully reduced
// (< r). Keeping values canonical is what makes device results bit-exact
// with the CPU: there is exactly one representation of each element.
//
// Carry chains are written in PTX (add.cc / madc) because plain C carries
// compile to compare-and-select sequences several times longer.
// r < 2^255, so a + b < 2^256 and CIOS needs no extra top word beyond t[5].

#ifndef FR_CUH
#define FR_CUH

typedef unsigned long long u64;
typedef unsigned int u32;

struct fr {
    u64 l[4];
};

// r = 0x73eda753299d7d483339d80809a1d80553bda402fffe5bfeffffffff00000001
#define FR_P0 0xffffffff00000001ULL
#define FR_P1 0x53bda402fffe5bfeULL
#define FR_P2 0x3339d80809a1d805ULL
#define FR_P3 0x73eda753299d7d48ULL
// -r^-1 mod 2^64
#define FR_INV 0xfffffffeffffffffULL

// Subtracts r when x >= r; x < 2r on entry.
__device__ __forceinline__ fr fr_reduce_once(fr x)
{
    u64 d0, d1, d2, d3, borrow;
    asm("sub.cc.u64 %0, %5, %9;\n\t"
        "subc.cc.u64 %1, %6, %10;\n\t"
        "subc.cc.u64 %2, %7, %11;\n\t"
        "subc.cc.u64 %3, %8, %12;\n\t"
        "subc.u64 %4, 0, 0;"
        : "=l"(d0), "=l"(d1), "=l"(d2), "=l"(d3), "=l"(borrow)
        : "l"(x.l[0]), "l"(x.l[1]), "l"(x.l[2]), "l"(x.l[3]),
          "l"(FR_P0), "l"(FR_P1), "l"(FR_P2), "l"(FR_P3));
    // borrow is all ones when x < r: keep x.
    fr out;
    out.l[0] = borrow ? x.l[0] : d0;
    out.l[1] = borrow ? x.l[1] : d1;
    out.l[2] = borrow ? x.l[2] : d2;
    out.l[3] = borrow ? x.l[3] : d3;
    return out;
}

__device__ __forceinline__ fr fr_add(fr a, fr b)
{
    fr s;
    asm("add.cc.u64 %0, %4, %8;\n\t"
        "addc.cc.u64 %1, %5, %9;\n\t"
        "addc.cc.u64 %2, %6, %10;\n\t"
        "addc.u64 %3, %7, %11;"
        : "=l"(s.l[0]), "=l"(s.l[1]), "=l"(s.l[2]), "=l"(s.l[3])
        : "l"(a.l[0]), "l"(a.l[1]), "l"(a.l[2]), "l"(a.l[3]),
          "l"(b.l[0]), "l"(b.l[1]), "l"(b.l[2]), "l"(b.l[3]));
    return fr_reduce_once(s);
}

__device__ __forceinline__ fr fr_sub(fr a, fr b)
{
    fr d;
    u64 borrow;
    asm("sub.cc.u64 %0, %5, %9;\n\t"
        "subc.cc.u64 %1, %6, %10;\n\t"
        "subc.cc.u64 %2, %7, %11;\n\t"
        "subc.cc.u64 %3, %8, %12;\n\t"
        "subc.u64 %4, 0, 0;"
        : "=l"(d.l[0]), "=l"(d.l[1]), "=l"(d.l[2]), "=l"(d.l[3]), "=l"(borrow)
        : "l"(a.l[0]), "l"(a.l[1]), "l"(a.l[2]), "l"(a.l[3]),
          "l"(b.l[0]), "l"(b.l[1]), "l"(b.l[2]), "l"(b.l[3]));
    // On borrow add r back (masked, so the code has no branch).
    fr out;
    asm("add.cc.u64 %0, %4, %8;\n\t"
        "addc.cc.u64 %1, %5, %9;\n\t"
        "addc.cc.u64 %2, %6, %10;\n\t"
        "addc.u64 %3, %7, %11;"
        : "=l"(out.l[0]), "=l"(out.l[1]), "=l"(out.l[2]), "=l"(out.l[3])
        : "l"(d.l[0]), "l"(d.l[1]), "l"(d.l[2]), "l"(d.l[3]),
          "l"(FR_P0 & borrow), "l"(FR_P1 & borrow), "l"(FR_P2 & borrow), "l"(FR_P3 & borrow));
    return out;
}

// One CIOS row: t += a * bi, then t += m * r with m = t0 * INV, then t >>= 64.
__device__ __forceinline__ void fr_mul_row(u64 &t0, u64 &t1, u64 &t2, u64 &t3, u64 &t4,
                                           const fr &a, u64 bi)
{
    u64 t5, m;
    asm("mad.lo.cc.u64 %0, %6, %10, %0;\n\t"
        "madc.lo.cc.u64 %1, %7, %10, %1;\n\t"
        "madc.lo.cc.u64 %2, %8, %10, %2;\n\t"
        "madc.lo.cc.u64 %3, %9, %10, %3;\n\t"
        "addc.cc.u64 %4, %4, 0;\n\t"
        "addc.u64 %5, 0, 0;\n\t"
        "mad.hi.cc.u64 %1, %6, %10, %1;\n\t"
        "madc.hi.cc.u64 %2, %7, %10, %2;\n\t"
        "madc.hi.cc.u64 %3, %8, %10, %3;\n\t"
        "madc.hi.cc.u64 %4, %9, %10, %4;\n\t"
        "addc.u64 %5, %5, 0;"
        : "+l"(t0), "+l"(t1), "+l"(t2), "+l"(t3), "+l"(t4), "=l"(t5)
        : "l"(a.l[0]), "l"(a.l[1]), "l"(a.l[2]), "l"(a.l[3]), "l"(bi));
    m = t0 * FR_INV;
    asm("mad.lo.cc.u64 %0, %6, %7, %0;\n\t"
        "madc.lo.cc.u64 %1, %6, %8, %1;\n\t"
        "madc.lo.cc.u64 %2, %6, %9, %2;\n\t"
        "madc.lo.cc.u64 %3, %6, %10, %3;\n\t"
        "addc.cc.u64 %4, %4, 0;\n\t"
        "addc.u64 %5, %5, 0;\n\t"
        "mad.hi.cc.u64 %1, %6, %7, %1;\n\t"
        "madc.hi.cc.u64 %2, %6, %8, %2;\n\t"
        "madc.hi.cc.u64 %3, %6, %9, %3;\n\t"
        "madc.hi.cc.u64 %4, %6, %10, %4;\n\t"
        "addc.u64 %5, %5, 0;"
        : "+l"(t0), "+l"(t1), "+l"(t2), "+l"(t3), "+l"(t4), "+l"(t5)
        : "l"(m), "l"(FR_P0), "l"(FR_P1), "l"(FR_P2), "l"(FR_P3));
    t0 = t1;
    t1 = t2;
    t2 = t3;
    t3 = t4;
    t4 = t5;
}

// a * b * R^-1 mod r (Montgomery product), canonical output.
__device__ __forceinline__ fr fr_mul(fr a, fr b)
{
    u64 t0 = 0, t1 = 0, t2 = 0, t3 = 0, t4 = 0;
    fr_mul_row(t0, t1, t2, t3, t4, a, b.l[0]);
    fr_mul_row(t0, t1, t2, t3, t4, a, b.l[1]);
    fr_mul_row(t0, t1, t2, t3, t4, a, b.l[2]);
    fr_mul_row(t0, t1, t2, t3, t4, a, b.l[3]);
    // t < 2r < 2^256, so t4 is zero here.
    fr out;
    out.l[0] = t0;
    out.l[1] = t1;
    out.l[2] = t2;
    out.l[3] = t3;
    return fr_reduce_once(out);
}

__device__ __forceinline__ fr fr_load(const fr *p)
{
    const ulonglong2 *q = reinterpret_cast<const ulonglong2 *>(p);
    ulonglong2 lo = q[0];
    ulonglong2 hi = q[1];
    fr out;
    out.l[0] = lo.x;
    out.l[1] = lo.y;
    out.l[2] = hi.x;
    out.l[3] = hi.y;
    return out;
}

__device__ __forceinline__ fr fr_load_ro(const fr *p)
{
    const ulonglong2 *q = reinterpret_cast<const ulonglong2 *>(p);
    ulonglong2 lo = __ldg(q);
    ulonglong2 hi = __ldg(q + 1);
    fr out;
    out.l[0] = lo.x;
    out.l[1] = lo.y;
    out.l[2] = hi.x;
    out.l[3] = hi.y;
    return out;
}

__device__ __forceinline__ void fr_store(fr *p, fr v)
{
    ulonglong2 *q = reinterpret_cast<ulonglong2 *>(p);
    q[0] = make_ulonglong2(v.l[0], v.l[1]);
    q[1] = make_ulonglong2(v.l[2], v.l[3]);
}

#endif // FR_CUH
