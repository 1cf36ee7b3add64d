// The G1 instance of the MSM's group steps (msm.cu): coordinates in Fp.
typedef ec_affine<fp> g1_affine;
typedef ec_xyzz<fp> g1_xyzz;

#ifdef MSM_ONLY_ACCUMULATE_SEGMENTS
// Four blocks of 128 threads (msm.rs: SEGMENT_THREADS) per multiprocessor
// instead of three at 162 registers: the H200 profile showed 2.95 warps a
// scheduler and 0.37 of them eligible (issue slots 26 % busy, stalls on
// fixed-latency carry chains), so a fourth warp is worth the 92 bytes
// spilled to reach 128 registers.
#undef MSM_SEGMENT_BOUNDS
#define MSM_SEGMENT_BOUNDS __launch_bounds__(128, 4)
MSM_ACCUMULATE_SEGMENTS_KERNEL(g1, fp)
#endif
#ifdef MSM_ONLY_ACCUMULATE_PARTIALS
MSM_ACCUMULATE_PARTIALS_KERNEL(g1, fp)
#endif
#ifdef MSM_ONLY_BUCKET_REDUCE
MSM_BUCKET_REDUCE_KERNEL(g1, fp)
#endif
#ifdef MSM_ONLY_WINDOW_SUM
MSM_WINDOW_SUM_KERNEL(g1, fp)
#endif
#ifdef MSM_ONLY_PRECOMPUTE
MSM_PRECOMPUTE_KERNEL(g1, fp)
#endif
