// The G2 instance of the MSM's group steps (msm.cu): coordinates in Fp2.
typedef ec_affine<fp2> g2_affine;
typedef ec_xyzz<fp2> g2_xyzz;

MSM_GROUP_KERNELS(g2, fp2)
