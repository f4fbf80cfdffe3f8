//! Fills the kernel cache ahead of time, here, for the GPU machine (`cuda::testing::precompile`):
//! ignored by default. `MOLLA_PRECOMPILE_MODELS`: model files, separated by ':' (their persistent
//! kernels; the main program always); `MOLLA_PRECOMPILE_DRIVER`: the device driver's
//! `cuDriverGetVersion` (default 13000, CUDA 13.0's: the H200 machine's); `MOLLA_PRECOMPILE_CC`:
//! its compute capability (default 9.0); `MOLLA_CACHE`: where the cache goes. The NVRTC found
//! here must be the device's version (13.0), as the cache keys hold it. `scripts/cuda-tests
//! precompile` runs it.

#[test]
#[ignore]
fn precompile_the_kernel_cache() {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let driver: i32 =
        env("MOLLA_PRECOMPILE_DRIVER").map_or(13000, |v| v.parse().expect("driver version"));
    let cc = env("MOLLA_PRECOMPILE_CC").map_or((9, 0), |v| {
        let (a, b) = v
            .split_once('.')
            .expect("compute capability as major.minor");
        (a.parse().expect("major"), b.parse().expect("minor"))
    });
    let models: Vec<model::Model> = env("MOLLA_PRECOMPILE_MODELS")
        .map(|v| {
            v.split(':')
                .map(|p| model::Model::open(p).unwrap_or_else(|e| panic!("{p}: {e}")))
                .collect()
        })
        .unwrap_or_default();
    let refs: Vec<&model::Model> = models.iter().collect();
    match cuda::testing::precompile(&refs, cc, driver) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
        }
        Err(e) => panic!("precompile: {e}"),
    }
}
