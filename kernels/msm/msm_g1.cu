// The G1 instance of the MSM's group steps (msm.cu): coordinates in Fp.
typedef ec_affine<fp> g1_affine;
typedef ec_xyzz<fp> g1_xyzz;

#ifdef MSM_ONLY_ACCUMULATE_SEGMENTS
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
