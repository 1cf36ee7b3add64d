// The G1 instance of the MSM's group steps (msm.cu): coordinates in Fp.
typedef ec_affine<fp> g1_affine;
typedef ec_xyzz<fp> g1_xyzz;

#ifdef MSM_ONLY_ACCUMULATE_SEGMENTS
// Three blocks of 128 threads (msm.rs: SEGMENT_THREADS) per multiprocessor:
// the loop is latency-bound (H200 profile: issue slots 39 % busy, the top
// stall a fixed-latency dependency, the carry chains), and the paired
// products (f_mul_pair) need up to 168 registers to run without spilling;
// bounded to 128 (four blocks) the pair's call spilled 164 bytes.
#undef MSM_SEGMENT_BOUNDS
#define MSM_SEGMENT_BOUNDS __launch_bounds__(128, 3)
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
