// The G1 instance of the MSM's group steps (msm.cu): coordinates in Fp.
typedef ec_affine<fp> g1_affine;
typedef ec_xyzz<fp> g1_xyzz;

#ifdef MSM_ONLY_ACCUMULATE_SEGMENTS
// Four blocks of 128 threads (msm.rs: SEGMENT_THREADS) per multiprocessor
// instead of three at 150 registers: the loop is latency-bound (H200
// profile: issue slots 39 % busy, 4 warps a scheduler, the top stall a
// fixed-latency dependency, the carry chains), and with the Fp products as
// calls (FP_MUL_CALL) 128 registers cost a 16-byte spill.
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
