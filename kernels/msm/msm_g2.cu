// The G2 instance of the MSM's group steps (msm.cu): coordinates in Fp2.
typedef ec_affine<fp2> g2_affine;
typedef ec_xyzz<fp2> g2_xyzz;

#ifdef MSM_ONLY_ACCUMULATE_SEGMENTS
MSM_ACCUMULATE_SEGMENTS_KERNEL(g2, fp2)
#endif
#ifdef MSM_ONLY_ACCUMULATE_PARTIALS
MSM_ACCUMULATE_PARTIALS_KERNEL(g2, fp2)
#endif
#ifdef MSM_ONLY_BUCKET_REDUCE
MSM_BUCKET_REDUCE_KERNEL(g2, fp2)
#endif
#ifdef MSM_ONLY_WINDOW_SUM
MSM_WINDOW_SUM_KERNEL(g2, fp2)
#endif
#ifdef MSM_ONLY_PRECOMPUTE
MSM_PRECOMPUTE_KERNEL(g2, fp2)
#endif
