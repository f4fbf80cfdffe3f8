//! The big-matrix decode matvecs (`matvec_wide` and the head's `matvec_wide_host`) give the
//! bits of the plain `matvec` on random data of real shapes, odd row counts included.

mod common;

use common::{MixedSegs, Rng, bits, gpu, matrices, matrix, widths};
use cuda::testing::{self, Input, Kernel, Seg};
use gguf::GgmlType;

/// The formats with q16 row decoders (the wide matvec kernels' formats).
const Q16_TYPES: [GgmlType; 8] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// `segs` on `x` through each of `kernels`, each asserted to give `matvec`'s bits in every
/// segment (`what` names the case).
fn segs_same_bits_as_matvec(
    g: &cuda::Gpu,
    kernels: &[Kernel],
    segs: &[Seg],
    cols: usize,
    x: &[f32],
    input: Input,
    what: &str,
) {
    let a = testing::matvec(g, Kernel::Matvec, segs, cols, x, input).unwrap();
    for &k in kernels {
        let b = testing::matvec(g, k, segs, cols, x, input).unwrap();
        for (i, (a, b)) in a.iter().zip(&b).enumerate() {
            assert_eq!(bits(a), bits(b), "{k:?} {what}, segment {i}");
        }
    }
}

/// One random `rows` x `cols` matrix of `ty` on a random input through each of `kernels`, each
/// asserted to give `matvec`'s bits.
fn same_bits_as_matvec(
    g: &cuda::Gpu,
    rng: &mut Rng,
    kernels: &[Kernel],
    ty: GgmlType,
    rows: usize,
    cols: usize,
) {
    let (w, _) = matrix(rng, ty, rows, cols);
    let x = rng.vec(cols, 1.0);
    let seg = Seg {
        ty,
        rows,
        w: &w,
        bias: None,
        acc: None,
    };
    segs_same_bits_as_matvec(
        g,
        kernels,
        &[seg],
        cols,
        &x,
        Input::Plain,
        &format!("{ty} {rows}x{cols}"),
    );
}

/// `matvec_wide` gives `matvec`'s bits: every q16 format at every width (the K-quants also at the
/// 8B's), then three fused segments of mixed formats with bias and residual under each input
/// preparation.
#[test]
fn matvec_wide_gives_the_bits_of_matvec() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(11);
    let kernels = [Kernel::Wide];
    for ty in Q16_TYPES {
        // Also the 8B's widths and one of 68 units for the K-quants: matvec_wide's Q4_K walk takes
        // two units a lane at a time past 64 units (q16_lean.cuh), one at a time below.
        let big: &[usize] = if ty.block_size() == 256 {
            &[4096, 4352, 14336]
        } else {
            &[]
        };
        for cols in widths(ty).into_iter().chain(big.iter().copied()) {
            same_bits_as_matvec(&g, &mut rng, &kernels, ty, 301 + cols % 7, cols);
        }
    }
    let m = MixedSegs::new(&mut rng);
    let segs = m.segs();
    for input in [
        Input::Plain,
        Input::RmsNorm {
            w: &m.aux,
            eps: 1e-5,
        },
        Input::SwiGlu { up: &m.aux },
        Input::GeGlu { up: &m.aux },
    ] {
        segs_same_bits_as_matvec(&g, &kernels, &segs, m.cols, &m.x, input, "fused");
    }
    println!("matvec_wide: the bits of matvec on every q16 format and input preparation");
}

/// `matvec_wide` on RMSNorm inputs one, two and more quantization trips wide (a trip is 2048
/// values of a 256-thread block: 576 and 1536, the 8B's 4096, and 8448 with a partial trip):
/// `matvec`'s bits, whether `matvec_prep_wide` prepares the input or, under
/// `MOLLA_KDEFS=WIDEPREP`, every block of `matvec_wide_norm` does.
#[test]
fn matvec_wide_on_rmsnorm_inputs_of_several_trips_gives_the_bits_of_matvec() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(29);
    for (ty, cols) in [
        (GgmlType::Q8_0, 576),
        (GgmlType::Q4_K, 1536),
        (GgmlType::Q4_K, 4096),
        (GgmlType::Q6_K, 8448),
    ] {
        let (w, _) = matrix(&mut rng, ty, 97, cols);
        let x = rng.vec(cols, 2.0);
        let nw = rng.vec(cols, 1.0);
        let seg = Seg {
            ty,
            rows: 97,
            w: &w,
            bias: None,
            acc: None,
        };
        let input = Input::RmsNorm { w: &nw, eps: 1e-5 };
        let what = format!("RMSNorm input, {ty} x {cols}");
        segs_same_bits_as_matvec(&g, &[Kernel::Wide], &[seg], cols, &x, input, &what);
    }
    println!(
        "matvec_wide: the bits of matvec on RMSNorm inputs of 576, 1536, 4096 and 8448 values"
    );
}

/// `matvec_wide_host` (a head after the persistent kernel: runs of rows a warp, the legacy
/// formats two rows at a time) gives `matvec`'s bits: every q16 format, SmolLM2's and Qwen's
/// head widths, odd and even row counts (a warp's last row alone), more rows than warps.
#[test]
fn matvec_wide_head_gives_the_bits_of_matvec() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(13);
    for ty in Q16_TYPES {
        let widths: &[usize] = if ty.block_size() == 256 {
            &[1024, 4096]
        } else {
            &[576, 896]
        };
        for &cols in widths {
            for rows in [301usize, 4224 * 2 + 7, 20000] {
                same_bits_as_matvec(&g, &mut rng, &[Kernel::WideHead], ty, rows, cols);
            }
        }
    }
    println!("matvec_wide_host: the bits of matvec on every q16 format");
}

/// More rows than the grid has warps (at most four blocks of eight an SM), so that a warp walks
/// several rows, across segments of different formats.
#[test]
fn matvec_wide_gives_the_bits_of_matvec_on_many_rows_a_warp() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(12);
    let cols = 4096;
    let types = [GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::Q6_K];
    let rows = [6001usize, 1499, 4003];
    let mats = matrices(&mut rng, &types, &rows, cols);
    let x = rng.vec(cols, 1.0);
    let segs: Vec<Seg> = (0..3)
        .map(|i| Seg {
            ty: types[i],
            rows: rows[i],
            w: &mats[i].0,
            bias: None,
            acc: None,
        })
        .collect();
    let kernels = [Kernel::Wide];
    segs_same_bits_as_matvec(&g, &kernels, &segs, cols, &x, Input::Plain, "many rows");
    println!("matvec_wide: the bits of matvec with several rows a warp");
}
