// Montgomery arithmetic in the BLS12-381 scalar field Fr.
//
// Layout matches blstrs::Scalar / blst_fr byte for byte: four little-endian
// 64-bit limbs holding a*R mod r with R = 2^256, fully reduced (< r) in
// every buffer a kernel hands on. Keeping values canonical is what makes
// device results bit-exact with the CPU: there is exactly one
// representation of each element. Inside the NTT (between its rounds and
// passes) values may also be in [0, 2r), the "lazy" forms below: 2r still
// fits in 256 bits, and a product whose first factor is canonical stays
// below 2r without its final subtraction.
//
// Carry chains are written in PTX (add.cc / madc) because plain C carries
// compile to compare-and-select sequences several times longer.
// r < 2^255, so the sum of two canonical values needs no carry word, and
// the multiplication's running sum stays below 2r * 2^32 < 2^288 (see
// fr_mul_lazy).

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
// 2r, the bound of the lazy forms
#define FR_2P0 0xfffffffe00000002ULL
#define FR_2P1 0xa77b4805fffcb7fdULL
#define FR_2P2 0x6673b0101343b00aULL
#define FR_2P3 0xe7db4ea6533afa90ULL

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

// a - b, plus m where it borrows: the difference modulo m for a, b < m
// (m = r here, m = 2r for the lazy forms below).
__device__ __forceinline__ fr fr_sub_wrap(fr a, fr b, u64 m0, u64 m1, u64 m2, u64 m3)
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
    // On borrow add m back (masked, so the code has no branch).
    fr out;
    asm("add.cc.u64 %0, %4, %8;\n\t"
        "addc.cc.u64 %1, %5, %9;\n\t"
        "addc.cc.u64 %2, %6, %10;\n\t"
        "addc.u64 %3, %7, %11;"
        : "=l"(out.l[0]), "=l"(out.l[1]), "=l"(out.l[2]), "=l"(out.l[3])
        : "l"(d.l[0]), "l"(d.l[1]), "l"(d.l[2]), "l"(d.l[3]),
          "l"(m0 & borrow), "l"(m1 & borrow), "l"(m2 & borrow), "l"(m3 & borrow));
    return out;
}

__device__ __forceinline__ fr fr_sub(fr a, fr b)
{
    return fr_sub_wrap(a, b, FR_P0, FR_P1, FR_P2, FR_P3);
}

// Lazy forms: a, b < 2r, result < 2r (congruent, not canonical). The sum
// can reach 4r > 2^256, so its carry word takes part in the comparison.
__device__ __forceinline__ fr fr_add_lazy(fr a, fr b)
{
    fr s, d;
    u64 c, keep;
    asm("add.cc.u64 %0, %5, %9;\n\t"
        "addc.cc.u64 %1, %6, %10;\n\t"
        "addc.cc.u64 %2, %7, %11;\n\t"
        "addc.cc.u64 %3, %8, %12;\n\t"
        "addc.u64 %4, 0, 0;"
        : "=l"(s.l[0]), "=l"(s.l[1]), "=l"(s.l[2]), "=l"(s.l[3]), "=l"(c)
        : "l"(a.l[0]), "l"(a.l[1]), "l"(a.l[2]), "l"(a.l[3]),
          "l"(b.l[0]), "l"(b.l[1]), "l"(b.l[2]), "l"(b.l[3]));
    // keep is all ones when the 257-bit sum is below 2r (then the carry
    // word was 0); with a carry the low words are below 2r, the
    // subtraction borrows from it and keep is 0.
    asm("sub.cc.u64 %0, %5, %10;\n\t"
        "subc.cc.u64 %1, %6, %11;\n\t"
        "subc.cc.u64 %2, %7, %12;\n\t"
        "subc.cc.u64 %3, %8, %13;\n\t"
        "subc.u64 %4, %9, 0;"
        : "=l"(d.l[0]), "=l"(d.l[1]), "=l"(d.l[2]), "=l"(d.l[3]), "=l"(keep)
        : "l"(s.l[0]), "l"(s.l[1]), "l"(s.l[2]), "l"(s.l[3]), "l"(c),
          "l"(FR_2P0), "l"(FR_2P1), "l"(FR_2P2), "l"(FR_2P3));
    fr out;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        out.l[k] = keep ? s.l[k] : d.l[k];
    }
    return out;
}

__device__ __forceinline__ fr fr_sub_lazy(fr a, fr b)
{
    return fr_sub_wrap(a, b, FR_2P0, FR_2P1, FR_2P2, FR_2P3);
}

// Multiplication works on 8 x 32-bit words although `struct fr` stores
// 4 x 64 bits (splitting a u64 into halves is free: they are a register
// pair). The GPU multiplies 32 x 32 bits natively; a 64-bit mad.lo/mad.hi
// is expanded by the compiler into several 32-bit IMADs plus carry fix-ups.
//
// Montgomery CIOS over 32-bit words with the partial products split by
// column parity (the "even/odd" technique of Emmart et al.): in one row,
// a[j]*b_i for even j covers columns (0,1), (2,3), ... and for odd j
// columns (1,2), (3,4), ..., so each parity is ONE carry chain of
// lo/hi pairs on disjoint 64-bit slots. ptxas turns each
// `madc.lo.cc` / `madc.hi.cc` pair into a single IMAD.WIDE.U32.X
// (32x32+64 -> 64 with carry in and out), and the two chains are
// independent, so a row is 8 wide multiply-adds in two parallel
// dependency chains instead of 16 IMADs on one serial carry flag.
//
// Accumulators after a row's reduction (columns relative to the row):
// E[w] at column w (E[0] == 0 mod 2^32 after reduction), O[w] at column
// w + 1. The shift by one word to the next row is a renaming: the next
// E is O (plus E[1] added into its lowest word), the next O is E[2..7].
// Bounds: with the row operand's partner a < r the running sum is below
// (a + r) * 2^32 < 2r * 2^32 < 2^288 (r < 2^255) whatever b is, so O
// times 2^32 never exceeds it and O's chain never carries out of O[7];
// E's chain carries into column 8, which is O[7].
//
// Constants: r's low word is 1, so -r^-1 mod 2^32 = 2^32 - 1 and the
// row's Montgomery factor is m = -E[0]; m * r[0] = m just clears E[0]
// with a carry iff E[0] != 0, which is E[0] + (2^32 - 1) carrying.
#define FR_W0 0x00000001u
#define FR_W1 0xffffffffu
#define FR_W2 0xfffe5bfeu
#define FR_W3 0x53bda402u
#define FR_W4 0x09a1d805u
#define FR_W5 0x3339d808u
#define FR_W6 0x299d7d48u
#define FR_W7 0x73eda753u

// First row: E = a_even * b, O = a_odd * b (disjoint slots, no carries).
__device__ __forceinline__ void fr_mul_first(u32 e[8], u32 o[8], const u32 a[8], u32 b)
{
    asm("mul.lo.u32 %0, %16, %24;\n\t"
        "mul.hi.u32 %1, %16, %24;\n\t"
        "mul.lo.u32 %2, %18, %24;\n\t"
        "mul.hi.u32 %3, %18, %24;\n\t"
        "mul.lo.u32 %4, %20, %24;\n\t"
        "mul.hi.u32 %5, %20, %24;\n\t"
        "mul.lo.u32 %6, %22, %24;\n\t"
        "mul.hi.u32 %7, %22, %24;\n\t"
        "mul.lo.u32 %8, %17, %24;\n\t"
        "mul.hi.u32 %9, %17, %24;\n\t"
        "mul.lo.u32 %10, %19, %24;\n\t"
        "mul.hi.u32 %11, %19, %24;\n\t"
        "mul.lo.u32 %12, %21, %24;\n\t"
        "mul.hi.u32 %13, %21, %24;\n\t"
        "mul.lo.u32 %14, %23, %24;\n\t"
        "mul.hi.u32 %15, %23, %24;"
        : "=r"(e[0]), "=r"(e[1]), "=r"(e[2]), "=r"(e[3]), "=r"(e[4]), "=r"(e[5]), "=r"(e[6]),
          "=r"(e[7]), "=r"(o[0]), "=r"(o[1]), "=r"(o[2]), "=r"(o[3]), "=r"(o[4]), "=r"(o[5]),
          "=r"(o[6]), "=r"(o[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(a[4]), "r"(a[5]), "r"(a[6]), "r"(a[7]),
          "r"(b));
}

// Shift by one word and add a * b: E' = O + E[1] (the carry out of that
// word feeds column 1, the first of O''s chain), O' = E[2..7] + a_odd * b,
// then E' += a_even * b with its top carry into O'[7].
__device__ __forceinline__ void fr_mul_next(u32 e[8], u32 o[8], const u32 a[8], u32 b)
{
    u32 n[8];
    asm("add.cc.u32 %8, %8, %16;\n\t"
        "madc.lo.cc.u32 %0, %24, %31, %17;\n\t"
        "madc.hi.cc.u32 %1, %24, %31, %18;\n\t"
        "madc.lo.cc.u32 %2, %26, %31, %19;\n\t"
        "madc.hi.cc.u32 %3, %26, %31, %20;\n\t"
        "madc.lo.cc.u32 %4, %28, %31, %21;\n\t"
        "madc.hi.cc.u32 %5, %28, %31, %22;\n\t"
        "madc.lo.cc.u32 %6, %30, %31, 0;\n\t"
        "madc.hi.u32 %7, %30, %31, 0;\n\t"
        "mad.lo.cc.u32 %8, %23, %31, %8;\n\t"
        "madc.hi.cc.u32 %9, %23, %31, %9;\n\t"
        "madc.lo.cc.u32 %10, %25, %31, %10;\n\t"
        "madc.hi.cc.u32 %11, %25, %31, %11;\n\t"
        "madc.lo.cc.u32 %12, %27, %31, %12;\n\t"
        "madc.hi.cc.u32 %13, %27, %31, %13;\n\t"
        "madc.lo.cc.u32 %14, %29, %31, %14;\n\t"
        "madc.hi.cc.u32 %15, %29, %31, %15;\n\t"
        "addc.u32 %7, %7, 0;"
        : "=r"(n[0]), "=r"(n[1]), "=r"(n[2]), "=r"(n[3]), "=r"(n[4]), "=r"(n[5]), "=r"(n[6]),
          "=r"(n[7]), "+r"(o[0]), "+r"(o[1]), "+r"(o[2]), "+r"(o[3]), "+r"(o[4]), "+r"(o[5]),
          "+r"(o[6]), "+r"(o[7])
        : "r"(e[1]), "r"(e[2]), "r"(e[3]), "r"(e[4]), "r"(e[5]), "r"(e[6]), "r"(e[7]),
          "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(a[4]), "r"(a[5]), "r"(a[6]), "r"(a[7]),
          "r"(b));
#pragma unroll
    for (int w = 0; w < 8; w++) {
        e[w] = o[w];
        o[w] = n[w];
    }
}

// The row's reduction: add m * r with m = -E[0], so column 0 becomes zero.
__device__ __forceinline__ void fr_mul_reduce(u32 e[8], u32 o[8])
{
    u32 m;
    // Negation in PTX: written as C, ptxas folds the minus sign into the
    // multiplications below and can no longer fuse their lo/hi pairs into
    // IMAD.WIDE (about 50 more instructions per fr_mul).
    asm("sub.u32 %0, 0, %1;" : "=r"(m) : "r"(e[0]));
    asm("mad.lo.cc.u32 %0, %16, %17, %0;\n\t"
        "madc.hi.cc.u32 %1, %16, %17, %1;\n\t"
        "madc.lo.cc.u32 %2, %16, %19, %2;\n\t"
        "madc.hi.cc.u32 %3, %16, %19, %3;\n\t"
        "madc.lo.cc.u32 %4, %16, %21, %4;\n\t"
        "madc.hi.cc.u32 %5, %16, %21, %5;\n\t"
        "madc.lo.cc.u32 %6, %16, %23, %6;\n\t"
        "madc.hi.u32 %7, %16, %23, %7;\n\t"
        "add.cc.u32 %8, %8, %24;\n\t"
        "addc.cc.u32 %9, %9, 0;\n\t"
        "madc.lo.cc.u32 %10, %16, %18, %10;\n\t"
        "madc.hi.cc.u32 %11, %16, %18, %11;\n\t"
        "madc.lo.cc.u32 %12, %16, %20, %12;\n\t"
        "madc.hi.cc.u32 %13, %16, %20, %13;\n\t"
        "madc.lo.cc.u32 %14, %16, %22, %14;\n\t"
        "madc.hi.cc.u32 %15, %16, %22, %15;\n\t"
        "addc.u32 %7, %7, 0;"
        : "+r"(o[0]), "+r"(o[1]), "+r"(o[2]), "+r"(o[3]), "+r"(o[4]), "+r"(o[5]), "+r"(o[6]),
          "+r"(o[7]), "+r"(e[0]), "+r"(e[1]), "+r"(e[2]), "+r"(e[3]), "+r"(e[4]), "+r"(e[5]),
          "+r"(e[6]), "+r"(e[7])
        : "r"(m), "n"(FR_W1), "n"(FR_W2), "n"(FR_W3), "n"(FR_W4), "n"(FR_W5), "n"(FR_W6),
          "n"(FR_W7), "n"(0xffffffffu));
}

// x * y * R^-1 mod r (Montgomery product, R = 2^256) without the final
// subtraction: for x < r and any y < 2^256 the result is below
// x*y/R + r < x + r < 2r. Only x bounds the running sum (x is the
// operand every row multiplies), so y may be a lazy value.
__device__ __forceinline__ fr fr_mul_lazy(fr x, fr y)
{
    u32 a[8], b[8], e[8], o[8];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        a[2 * k] = (u32)x.l[k];
        a[2 * k + 1] = (u32)(x.l[k] >> 32);
        b[2 * k] = (u32)y.l[k];
        b[2 * k + 1] = (u32)(y.l[k] >> 32);
    }
    fr_mul_first(e, o, a, b[0]);
    fr_mul_reduce(e, o);
#pragma unroll
    for (int i = 1; i < 8; i++) {
        fr_mul_next(e, o, a, b[i]);
        fr_mul_reduce(e, o);
    }
    // Final shift: the result is O + E[1..7] (< 2r).
    u32 t[8];
    asm("add.cc.u32 %0, %8, %16;\n\t"
        "addc.cc.u32 %1, %9, %17;\n\t"
        "addc.cc.u32 %2, %10, %18;\n\t"
        "addc.cc.u32 %3, %11, %19;\n\t"
        "addc.cc.u32 %4, %12, %20;\n\t"
        "addc.cc.u32 %5, %13, %21;\n\t"
        "addc.cc.u32 %6, %14, %22;\n\t"
        "addc.u32 %7, %15, 0;"
        : "=r"(t[0]), "=r"(t[1]), "=r"(t[2]), "=r"(t[3]), "=r"(t[4]), "=r"(t[5]), "=r"(t[6]),
          "=r"(t[7])
        : "r"(o[0]), "r"(o[1]), "r"(o[2]), "r"(o[3]), "r"(o[4]), "r"(o[5]), "r"(o[6]), "r"(o[7]),
          "r"(e[1]), "r"(e[2]), "r"(e[3]), "r"(e[4]), "r"(e[5]), "r"(e[6]), "r"(e[7]));
    fr out;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        out.l[k] = ((u64)t[2 * k + 1] << 32) | t[2 * k];
    }
    return out;
}

// x * y * R^-1 mod r, canonical; x < r, y < 2^256.
__device__ __forceinline__ fr fr_mul(fr x, fr y)
{
    return fr_reduce_once(fr_mul_lazy(x, y));
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
