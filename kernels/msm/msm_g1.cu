// The G1 instance of the MSM's group steps (msm.cu): coordinates in Fp.
typedef ec_affine<fp> g1_affine;
typedef ec_xyzz<fp> g1_xyzz;

MSM_GROUP_KERNELS(g1, fp)
