//! NVRTC compilation of the embedded kernel sources to a CUBIN for the device's architecture,
//! cached on disk in `${MOLLA_CACHE:-~/.cache/molla}/kernels`, keyed by a hash of the source, the
//! architecture, the driver and NVRTC versions and the compiler options.

use crate::error::{CudaError, Result, one_line};
use cudarc::nvrtc::{result as nv, sys as nvsys};
use std::ffi::CString;
use std::path::PathBuf;

/// The kernel files, compiled as one program in this order (the `.cuh` files first).
const SOURCES: &[(&str, &str)] = &[
    ("common.cuh", include_str!("../kernels/common.cuh")),
    ("ktrace.cuh", include_str!("../kernels/ktrace.cuh")),
    ("dequant.cuh", include_str!("../kernels/dequant.cuh")),
    ("q16.cuh", include_str!("../kernels/q16.cuh")),
    ("q16_rows.cuh", include_str!("../kernels/q16_rows.cuh")),
    ("cp_async.cuh", include_str!("../kernels/cp_async.cuh")),
    ("q16_lean.cuh", include_str!("../kernels/q16_lean.cuh")),
    ("matvec.cu", include_str!("../kernels/matvec.cu")),
    (
        "matvec_multi.cu",
        include_str!("../kernels/matvec_multi.cu"),
    ),
    ("matmul.cu", include_str!("../kernels/matmul.cu")),
    ("norm.cu", include_str!("../kernels/norm.cu")),
    ("rope.cu", include_str!("../kernels/rope.cu")),
    ("attention.cu", include_str!("../kernels/attention.cu")),
    ("elementwise.cu", include_str!("../kernels/elementwise.cu")),
    ("pick.cu", include_str!("../kernels/pick.cu")),
    (
        "persistent_steps.cuh",
        include_str!("../kernels/persistent_steps.cuh"),
    ),
    (
        "persistent_chunks.cuh",
        include_str!("../kernels/persistent_chunks.cuh"),
    ),
    (
        "persistent_fused.cuh",
        include_str!("../kernels/persistent_fused.cuh"),
    ),
    ("persistent.cu", include_str!("../kernels/persistent.cu")),
    ("convert.cu", include_str!("../kernels/convert.cu")),
];

/// The files of the persistent decode kernel, which only its own program compiles.
const PERSISTENT_ONLY: &[&str] = &[
    "persistent_steps.cuh",
    "persistent_chunks.cuh",
    "persistent_fused.cuh",
    "persistent.cu",
];

/// The two NVRTC programs. The main one holds every kernel but the persistent decode kernel and
/// is the same for every model; the persistent kernel's own program reads every file (for their
/// device functions; kernels/common.cuh `MOLLA_KERNEL` leaves the other kernels out of it) and may
/// be built for one model's weight types, so a new set of types compiles (and caches) only it:
/// ~3 s instead of the whole source's ~20.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Program {
    /// Every kernel but the persistent one; `legpad`: for Q8_0, Q4_0 and Q5_0 blocks padded on
    /// upload (`PkBuild::legpad`, kernels/common.cuh `LEGPAD`).
    Main {
        legpad: bool,
    },
    Persistent(PkBuild),
}

impl Program {
    /// The main program for blocks as the file stores them.
    pub(crate) const MAIN: Program = Program::Main { legpad: false };
}

/// What the persistent kernel is built for (`persistent::pk_build`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PkBuild {
    /// The weight types it multiplies by (bit t: ggml type t; kernels/persistent.cu
    /// `PK_TYMASK`), or all of them.
    pub(crate) types: Option<u64>,
    /// The head shape (head_dim, head_dim_v, n_head, n_head_kv) compiled in (kernels/persistent.cu
    /// `PK_HD`...), or read from the arguments.
    pub(crate) shape: Option<[u32; 4]>,
    /// Only for step lists whose every matvec step is packed (kernels/persistent.cu
    /// `PK_PACKED_ONLY`: the chunked row pipeline left out), or for any.
    pub(crate) packed: bool,
    /// With wo folded into attention (kernels/persistent_steps.cuh `PK_OP_ATTN_WO`,
    /// `PK_FOLD_WO`): the model's wo matrices are all of legacy q16 formats over heads of whole
    /// 32-column units (`persistent::pk_build`). Every decode path then sums wo's rows in fixed
    /// point, so that they keep giving the same bits.
    pub(crate) fold: bool,
    /// Threads a block (kernels/persistent_steps.cuh `PK_THREADS`): 384 (`PK_NTHREADS`) for a
    /// model whose gate/up pairs would take more than two rounds of eight warps a block
    /// (`persistent::pk_build`), else 0 for the default 256.
    pub(crate) threads: u32,
    /// The token embedding's type (kernels/persistent.cu `PK_EMBTY`: the first step's row lookup
    /// decodes only it, 880 instructions fewer on SmolLM2's build; measured +0.4-1.5% tokens/s,
    /// session 32), or any type the lookup knows.
    pub(crate) emb: Option<u32>,
    /// Only for caches of at most one attention tile, staged in shared memory
    /// (kernels/persistent.cu `PK_SHORT`: attend's multi-tile fold and the unstaged path left
    /// out); `Persistent::launch` takes it up to the position where that holds.
    pub(crate) short: bool,
    /// Each role's row code built only for its own types (the default since session 45, see
    /// `PkRoles`), or for every type of the kernel (`MOLLA_PK_ROLES=0`).
    pub(crate) roles: Option<PkRoles>,
    /// `MOLLA_KDEFS=FUSEQKV` (an experiment, crate::fused): q/k/v of every layer but the first
    /// made in the down step before (`PK_FUSEQKV`: the W16 row walk and the attention step that
    /// normalises its input), for a model whose every step hands over tagged words and folds wo.
    pub(crate) fuse: bool,
    /// Each packed step's weights asked of L2 a step ahead (`PK_NEXT_L2`; `persistent::pk_build`
    /// `next_l2`): for models whose steps' shares of weights land later than their inputs.
    pub(crate) next_l2: bool,
    /// Q8_0, Q4_0 and Q5_0 blocks padded on upload (weights.rs `pad_legacy`, kernels/common.cuh
    /// `LEGPAD`; `persistent::pk_build` `legpad`): the main program is built so too.
    pub(crate) legpad: bool,
}

/// The persistent kernel's row code by role (written as `MOLLA_KDEFS=ROLEMASK`, the default since
/// session 45; `persistent::pk_build`, kernels/persistent.cu).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PkRoles {
    /// The gate/up pairs' types (`PK_TYMASK_PAIR`).
    pub(crate) pair: u64,
    /// The folded wo's types (`PK_TYMASK_FOLD`).
    pub(crate) fold: u64,
    /// Every pair's two matrices of one type (`PK_PAIR_SAME`: no row-by-row pair path).
    pub(crate) same: bool,
    /// A warp takes one row at a time in every other matvec step (`PK_ROWS1`: only the one-row
    /// walk built): for models whose steps have no more rows a block than warps and whose head
    /// runs after the kernel. Any step list stays correct; a wider one only takes more rounds.
    pub(crate) rows1: bool,
    /// Every step's input comes as tagged words (`PK_LL_ONLY`: the counter-fed input path not
    /// built): for models whose every output is at most `MOLLA_PK_LL_MAX` wide.
    pub(crate) ll_only: bool,
    /// The gate/up pairs a half-warp each (`PK_PAIR_HALF`; needs `same`): two pairs a warp, so
    /// that a block with more pairs than warps, up to twice as many, takes one round, not two.
    pub(crate) half: bool,
}

impl PkBuild {
    /// Threads a block of the kernel built so (`MOLLA_KDEFS=PKT=N` overrides it).
    pub(crate) fn block_threads(&self) -> u32 {
        experiment_value("PKT")
            .and_then(|v| v.parse().ok())
            .filter(|&n: &u32| (32..=1024).contains(&n) && n % 32 == 0)
            .unwrap_or(if self.threads == 0 { 256 } else { self.threads })
    }

    /// What the kernel was built for, for `decode_path`: "generic", or e.g. "built for Q4_1,
    /// heads 64/64 x 9/3".
    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = self.types {
            let names: Vec<String> = (0..64u32)
                .filter(|t| m >> t & 1 == 1)
                .map(|t| match gguf::GgmlType::from_id(t) {
                    _ if t == crate::fused::T_W16 as u32 => "W16".to_string(),
                    Some(g) => g.to_string(),
                    None => format!("type {t}"),
                })
                .collect();
            parts.push(names.join("+"));
        }
        if let Some([hd, hdv, nh, nkv]) = self.shape {
            parts.push(format!("heads {hd}/{hdv} x {nh}/{nkv}"));
        }
        if self.packed {
            parts.push("packed steps".into());
        }
        if self.short {
            parts.push("short caches".into());
        }
        if self.fold {
            parts.push("wo folded".into());
        }
        if self.fuse {
            parts.push("fused q/k/v".into());
        }
        if self.next_l2 {
            parts.push("next weights to L2".into());
        }
        if self.legpad {
            parts.push("legacy blocks padded".into());
        }
        if self.threads != 0 {
            parts.push(format!("{} threads a block", self.threads));
        }
        if parts.is_empty() {
            "generic".into()
        } else {
            format!("built for {}", parts.join(", "))
        }
    }
}

/// The files of `program`, in order: (name, text).
fn sources(program: Program) -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    SOURCES.iter().filter(move |(name, _)| {
        !matches!(program, Program::Main { .. }) || !PERSISTENT_ONLY.contains(name)
    })
}

/// The program's source, with `#line` markers so compiler messages name the original files.
pub(crate) fn program_source(program: Program) -> String {
    let mut s = String::new();
    for (name, text) in sources(program) {
        s.push_str(&format!("#line 1 \"{name}\"\n"));
        s.push_str(text);
        s.push('\n');
    }
    s
}

/// FNV-1a, 64 bits: stable across Rust versions, unlike `DefaultHasher`.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in p.iter().chain(&[0xffu8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// Where `program`'s CUBIN for compute capability `cc` under driver `driver_version` is cached
/// (None without a home).
pub(crate) fn cache_path(cc: (i32, i32), driver_version: i32, program: Program) -> Option<PathBuf> {
    cache_file(
        &program_source(program),
        &options(cc, program),
        driver_version,
    )
}

/// The cache file of source `src` compiled with `opts`: keyed by both and the driver's and
/// NVRTC's versions.
fn cache_file(src: &str, opts: &[String], driver_version: i32) -> Option<PathBuf> {
    let (nv_major, nv_minor) = nvrtc_version();
    let meta = format!("{opts:?} driver {driver_version} nvrtc {nv_major}.{nv_minor}");
    let key = fnv1a(&[src.as_bytes(), meta.as_bytes()]);
    cache_dir().map(|d| d.join(format!("molla-{key:016x}.cubin")))
}

fn cache_dir() -> Option<PathBuf> {
    let base = match std::env::var_os("MOLLA_CACHE") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(std::env::var_os("HOME")?)
            .join(".cache")
            .join("molla"),
    };
    Some(base.join("kernels"))
}

fn nvrtc_version() -> (i32, i32) {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters; the library is known to be present (checked by the caller).
    let _ = unsafe { nvsys::nvrtcVersion(&mut major, &mut minor) };
    (major, minor)
}

/// Whether the decode kernels launch as programmatic dependents (crate::pdl): compute
/// capability 9.0 and up, unless `MOLLA_PDL=0` (on by default since session 25: 4-5% on the
/// 8B's shape in process). The kernels are then compiled with `MOLLA_PDL` defined (their
/// `griddepcontrol` instructions); else they are as before.
pub(crate) fn pdl(cc: (i32, i32)) -> bool {
    cc.0 >= 9 && std::env::var("MOLLA_PDL").map_or(true, |v| v != "0")
}

/// NVRTC options of `program` for compute capability `cc`.
fn options(cc: (i32, i32), program: Program) -> Vec<String> {
    options_with(cc, program, experiment_defines())
}

/// [`options`] with the experiments' defines `experiments` (`-DMOLLA_X_...`).
fn options_with(cc: (i32, i32), program: Program, experiments: Vec<String>) -> Vec<String> {
    let mut opts = vec![
        format!("--gpu-architecture=sm_{}{}", cc.0, cc.1),
        "--std=c++17".to_string(),
    ];
    if pdl(cc) {
        opts.push("-DMOLLA_PDL".to_string());
    }
    opts.push(format!("-DATT_TILE={}", crate::launch::att_tile()));
    if let Program::Main { legpad: true } | Program::Persistent(PkBuild { legpad: true, .. }) =
        program
    {
        opts.push("-DMOLLA_LEGPAD".to_string());
    }
    if let Program::Persistent(pk) = program {
        opts.push("-DMOLLA_PK_ONLY".to_string());
        if let Some(m) = pk.types {
            opts.push(format!("-DPK_TYMASK={m}ull"));
        }
        if let Some(sh) = pk.shape {
            for (name, v) in ["PK_HD", "PK_HDV", "PK_NH", "PK_NKV"].iter().zip(sh) {
                opts.push(format!("-D{name}={v}"));
            }
        }
        if pk.packed {
            opts.push("-DPK_PACKED_ONLY".to_string());
        }
        if pk.fold {
            opts.push("-DPK_FOLD_WO".to_string());
        }
        if pk.threads != 0 {
            opts.push(format!("-DPK_NTHREADS={}", pk.threads));
        }
        if let Some(t) = pk.emb {
            opts.push(format!("-DPK_EMBTY={t}"));
        }
        if pk.short {
            opts.push("-DPK_SHORT".to_string());
        }
        if pk.fuse {
            opts.push("-DPK_FUSEQKV".to_string());
        }
        if pk.next_l2 {
            opts.push("-DPK_NEXT_L2".to_string());
        }
        if let Some(r) = pk.roles {
            opts.push(format!("-DPK_TYMASK_PAIR={}ull", r.pair));
            opts.push(format!("-DPK_TYMASK_FOLD={}ull", r.fold));
            let flags = [
                (r.same, "PAIR_SAME"),
                (r.rows1, "ROWS1"),
                (r.ll_only, "LL_ONLY"),
                (r.half, "PAIR_HALF"),
            ];
            opts.extend(
                flags
                    .iter()
                    .filter(|f| f.0)
                    .map(|f| format!("-DPK_{}", f.1)),
            );
        }
    }
    // Only the experiments the program's files name: another one would change its cache key and
    // compile it again for nothing (16 s for the main program, on each setting compared).
    opts.extend(experiments.into_iter().filter(|d| {
        let name = d.trim_start_matches("-D");
        let name = name.split_once('=').map_or(name, |(n, _)| n);
        sources(program).any(|(_, text)| text.contains(name))
    }));
    opts
}

/// Whether `MOLLA_KDEFS` defines the experiment `name` (the kernels then see `MOLLA_X_<name>`).
pub(crate) fn experiment(name: &str) -> bool {
    let var = format!("-DMOLLA_X_{name}");
    experiment_defines()
        .iter()
        .any(|d| d == &var || d.starts_with(&format!("{var}=")))
}

/// The value `MOLLA_KDEFS` gives the experiment `name` (`NAME=VALUE`), if any.
pub(crate) fn experiment_value(name: &str) -> Option<String> {
    let var = format!("-DMOLLA_X_{name}=");
    experiment_defines()
        .iter()
        .find_map(|d| d.strip_prefix(&var).map(str::to_string))
}

/// Kernel variants under measurement: `MOLLA_KDEFS` names preprocessor symbols (separated by spaces or commas,
/// `NAME` or `NAME=VALUE`, letters, digits and `_` only), each passed to NVRTC as `-DMOLLA_X_NAME`
/// so that only symbols the kernels mean for experiments can be set (docs/cuda-persistent.md
/// names those that exist). Part of the cache key as every option.
fn experiment_defines() -> Vec<String> {
    std::env::var("MOLLA_KDEFS").map_or_else(|_| Vec::new(), |v| parse_defines(&v))
}

/// `MOLLA_KDEFS`'s value as NVRTC options (see [`experiment_defines`]); malformed items dropped.
fn parse_defines(v: &str) -> Vec<String> {
    let ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    v.split(|c: char| c.is_whitespace() || c == ',')
        .filter(|d| !d.is_empty())
        .filter(|d| {
            let (name, val) = d.split_once('=').unwrap_or((d, "1"));
            ok(name) && ok(val)
        })
        .map(|d| format!("-DMOLLA_X_{d}"))
        .collect()
}

/// A CUBIN of `program` for compute capability `cc`, from the disk cache when present.
/// Returns the bytes and the cache path they were read from, if any.
pub(crate) fn cubin(
    cc: (i32, i32),
    driver_version: i32,
    program: Program,
) -> Result<(Vec<u8>, Option<PathBuf>)> {
    let src = program_source(program);
    let opts = options(cc, program);
    let path = cache_file(&src, &opts, driver_version);
    if let Some(p) = &path
        && let Ok(bytes) = std::fs::read(p)
        && !bytes.is_empty()
    {
        return Ok((bytes, Some(p.clone())));
    }
    let bin = compile(&src, &opts)?;
    if let Some(p) = &path {
        store(p, &bin);
    }
    Ok((bin, None))
}

/// Compiles without looking at the cache (after a cached CUBIN failed to load), and refreshes it.
pub(crate) fn recompile(
    cc: (i32, i32),
    stale: &std::path::Path,
    program: Program,
) -> Result<Vec<u8>> {
    let opts = options(cc, program);
    let bin = compile(&program_source(program), &opts)?;
    store(stale, &bin);
    Ok(bin)
}

/// Writes atomically (temporary file, then rename); a cache that cannot be written is skipped.
fn store(path: &std::path::Path, bin: &[u8]) {
    if let Some(dir) = path.parent()
        && std::fs::create_dir_all(dir).is_ok()
    {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, bin).is_ok() && std::fs::rename(&tmp, path).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

fn compile(src: &str, opts: &[String]) -> Result<Vec<u8>> {
    let csrc =
        CString::new(src).map_err(|_| CudaError::Compile("source holds a NUL byte".into()))?;
    let prog = nv::create_program(&csrc, Some(c"molla.cu"))
        .map_err(|e| CudaError::Compile(format!("{e}")))?;
    // SAFETY: `prog` was created above and is destroyed exactly once, below.
    let out = unsafe { compile_and_get(prog, opts) };
    // SAFETY: as above.
    let _ = unsafe { nv::destroy_program(prog) };
    out
}

/// # Safety
/// `prog` must be a live program from `create_program`.
unsafe fn compile_and_get(prog: nvsys::nvrtcProgram, opts: &[String]) -> Result<Vec<u8>> {
    // SAFETY: the caller guarantees `prog` is live.
    if let Err(e) = unsafe { nv::compile_program(prog, opts) } {
        // SAFETY: as above.
        let log = unsafe { nv::get_program_log(prog) }.unwrap_or_default();
        let log: Vec<u8> = log
            .iter()
            .map(|&c| c as u8)
            .take_while(|&c| c != 0)
            .collect();
        return Err(CudaError::Compile(format!(
            "{e}: {}",
            one_line(&String::from_utf8_lossy(&log))
        )));
    }
    let mut size = 0usize;
    // SAFETY: as above; `size` is an out-parameter.
    unsafe { nvsys::nvrtcGetCUBINSize(prog, &mut size) }
        .result()
        .map_err(|e| CudaError::Compile(format!("no CUBIN: {e}")))?;
    let mut bin = vec![0u8; size];
    // SAFETY: `bin` holds `size` bytes, as NVRTC asked for.
    unsafe { nvsys::nvrtcGetCUBIN(prog, bin.as_mut_ptr().cast()) }
        .result()
        .map_err(|e| CudaError::Compile(format!("no CUBIN: {e}")))?;
    Ok(bin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn experiment_defines_take_only_plain_names_and_values() {
        assert_eq!(
            parse_defines("Q6PAD  N=4 bad-name X=a;b =1 Y="),
            ["-DMOLLA_X_Q6PAD", "-DMOLLA_X_N=4"]
        );
        assert!(parse_defines("").is_empty());
        assert_eq!(
            parse_defines("KSWZ,STAGEW0, ,A=1"),
            ["-DMOLLA_X_KSWZ", "-DMOLLA_X_STAGEW0", "-DMOLLA_X_A=1"]
        );
    }

    #[test]
    fn source_is_assembled_in_order_and_hash_is_stable() {
        let s = program_source(Program::Persistent(PkBuild::default()));
        let common = s.find("common.cuh").unwrap();
        let matvec = s.find("\"matvec.cu\"").unwrap();
        let pk = s.find("\"persistent.cu\"").unwrap();
        assert!(common < matvec && matvec < pk);
        assert!(!s.contains('\0'));
        let m = program_source(Program::MAIN);
        assert!(m.contains("\"matvec.cu\"") && !m.contains("\"persistent.cu\""));
        assert_eq!(fnv1a(&[b"a", b"b"]), fnv1a(&[b"a", b"b"]));
        assert_ne!(fnv1a(&[b"ab", b""]), fnv1a(&[b"a", b"b"]));
    }

    /// Compiles `program` for sm_90 with NVRTC alone (no GPU), with `extra` defines; false when
    /// there is no libnvrtc to load (a skip, unless `MOLLA_REQUIRE_NVRTC=1`: scripts/test finds
    /// the nvidia-cuda-nvrtc wheel's, and CI requires it).
    fn compiles(program: Program, extra: &[&str]) -> bool {
        // SAFETY: only tries to open the shared library.
        if !unsafe { nvsys::is_culib_present() } {
            let required = std::env::var("MOLLA_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "MOLLA_REQUIRE_NVRTC=1, but no libnvrtc was found"
            );
            eprintln!(
                "skipped: no libnvrtc (scripts/requirements.txt's nvidia-cuda-nvrtc has one)"
            );
            return false;
        }
        let mut opts = options((9, 0), program);
        opts.extend(extra.iter().map(|d| format!("-D{d}")));
        if let Err(e) = compile(&program_source(program), &opts) {
            panic!("{program:?} {extra:?}: {e}");
        }
        true
    }

    /// SmolLM2's build: Q4_1 and Q8_0 weights, 64-wide heads, 9 over 3.
    const SMOL: PkBuild = PkBuild {
        types: Some(1 << 3 | 1 << 8),
        shape: Some([64, 64, 9, 3]),
        packed: false,
        fold: false,
        threads: 0,
        emb: Some(8),
        short: false,
        roles: None,
        fuse: false,
        next_l2: false,
        legpad: false,
    };

    #[test]
    fn the_main_program_compiles() {
        if compiles(Program::MAIN, &[]) {
            compiles(
                Program::MAIN,
                &[
                    "MOLLA_PDL",
                    "MOLLA_X_Q6FILE",
                    "MOLLA_X_DIVSQRT",
                    "MOLLA_X_A2WORDS",
                    "MOLLA_X_QSKIP",
                ],
            );
            compiles(Program::MAIN, &["MOLLA_PDL", "MOLLA_X_KTRACE"]);
            compiles(Program::MAIN, &["MOLLA_PDL", "MOLLA_X_WIDEPREP"]);
            // Q8_0, Q4_0 and Q5_0 blocks padded on upload.
            compiles(Program::Main { legpad: true }, &["MOLLA_PDL"]);
        }
    }

    #[test]
    fn the_generic_persistent_kernel_compiles() {
        compiles(Program::Persistent(PkBuild::default()), &[]);
    }

    #[test]
    fn the_persistent_kernel_compiles_for_a_model_and_its_experiments() {
        if compiles(Program::Persistent(SMOL), &[]) {
            compiles(
                Program::Persistent(SMOL),
                &["MOLLA_X_PKMEASURE", "MOLLA_X_LLVOL", "MOLLA_X_DIVSQRT"],
            );
            let packed = PkBuild {
                packed: true,
                fold: true,
                ..SMOL
            };
            compiles(Program::Persistent(packed), &[]);
            // Every thread staging, then every thread polling (a measurement).
            compiles(
                Program::Persistent(packed),
                &["MOLLA_X_NOSPLIT", "MOLLA_X_PKMEASURE"],
            );
            // The legacy formats' shared-memory rows read in aligned words (an experiment).
            compiles(Program::Persistent(packed), &["MOLLA_X_A2WORDS"]);
            // The pollers staging before their input, and waiting at a step's end (the way
            // before session 47, for measurements).
            compiles(
                Program::Persistent(packed),
                &["MOLLA_X_NOPOLLFIRST", "MOLLA_X_NOENDARRIVE"],
            );
            // The quantization's trips skipped by warps with no block of the row (an experiment).
            compiles(Program::Persistent(packed), &["MOLLA_X_QSKIP"]);
            // For short caches (PK_SHORT).
            compiles(
                Program::Persistent(PkBuild {
                    short: true,
                    ..packed
                }),
                &[],
            );
            // Twelve warps a block (Qwen2.5-0.5B's build).
            let twelve = PkBuild {
                threads: 384,
                ..packed
            };
            compiles(Program::Persistent(twelve), &[]);
            // Each step's weights asked of L2 a step ahead (Qwen2.5-0.5B's and SmolLM2 Q8_0's).
            let next = PkBuild {
                next_l2: true,
                ..twelve
            };
            compiles(Program::Persistent(next), &[]);
            compiles(
                Program::Persistent(PkBuild {
                    legpad: true,
                    ..next
                }),
                &[],
            );
            // q/k/v made in the down step before (FUSEQKV, an experiment; the W16 type's bit in
            // the mask as the host sets it).
            let fused = PkBuild {
                types: Some(1 << 3 | 1 << 8 | 1 << 63),
                fuse: true,
                short: true,
                ..packed
            };
            compiles(Program::Persistent(fused), &[]);
            // With the next fused down step's spans asked of L2 a step early (a measurement).
            compiles(Program::Persistent(fused), &["MOLLA_X_FUSEL2"]);
            // Each role's row code for its own types, one row a warp (the default for such
            // models), and with the gate/up pairs a half-warp each (SmolLM2 Q8_0's build).
            let roles = PkRoles {
                pair: 1 << 3,
                fold: 1 << 3,
                same: true,
                rows1: true,
                ll_only: true,
                half: false,
            };
            let by_role = PkBuild {
                short: true,
                roles: Some(roles),
                ..twelve
            };
            compiles(Program::Persistent(by_role), &[]);
            let half = PkRoles {
                half: true,
                ..roles
            };
            compiles(
                Program::Persistent(PkBuild {
                    roles: Some(half),
                    threads: 0,
                    ..by_role
                }),
                &[],
            );
        }
    }

    #[test]
    fn a_build_describes_itself() {
        assert_eq!(PkBuild::default().describe(), "generic");
        assert_eq!(SMOL.describe(), "built for Q4_1+Q8_0, heads 64/64 x 9/3");
        let folded = PkBuild { fold: true, ..SMOL };
        assert_eq!(
            folded.describe(),
            "built for Q4_1+Q8_0, heads 64/64 x 9/3, wo folded"
        );
    }

    #[test]
    fn a_program_takes_only_the_experiments_it_names() {
        let defs = parse_defines("PKMEASURE,Q6FILE,NOSUCH");
        let main = options_with((9, 0), Program::MAIN, defs.clone());
        let pk = options_with((9, 0), Program::Persistent(PkBuild::default()), defs);
        assert!(main.contains(&"-DMOLLA_X_Q6FILE".to_string()));
        assert!(
            !main
                .iter()
                .any(|o| o.contains("PKMEASURE") || o.contains("NOSUCH"))
        );
        assert!(pk.contains(&"-DMOLLA_X_PKMEASURE".to_string()));
        assert!(pk.contains(&"-DMOLLA_X_Q6FILE".to_string()));
        assert!(!pk.iter().any(|o| o.contains("NOSUCH")));
    }

    #[test]
    fn only_the_persistent_program_takes_the_types_and_shape() {
        let cc = (9, 0);
        let main = options(cc, Program::MAIN);
        assert!(
            !main
                .iter()
                .any(|o| o.contains("PK_") || o.contains("LEGPAD"))
        );
        let padded = options(cc, Program::Main { legpad: true });
        assert!(padded.contains(&"-DMOLLA_LEGPAD".to_string()));
        let all = options(cc, Program::Persistent(PkBuild::default()));
        assert!(all.contains(&"-DMOLLA_PK_ONLY".to_string()));
        assert!(!all.iter().any(|o| o.starts_with("-DPK_")));
        let some = options(
            cc,
            Program::Persistent(PkBuild {
                types: Some(8),
                shape: Some([64, 64, 9, 3]),
                packed: true,
                fold: true,
                threads: 384,
                emb: Some(8),
                short: true,
                roles: Some(PkRoles {
                    pair: 8,
                    fold: 8,
                    same: true,
                    rows1: true,
                    ll_only: true,
                    half: true,
                }),
                fuse: true,
                next_l2: true,
                legpad: true,
            }),
        );
        for o in [
            "-DMOLLA_LEGPAD",
            "-DPK_FUSEQKV",
            "-DPK_NEXT_L2",
            "-DPK_TYMASK=8ull",
            "-DPK_TYMASK_PAIR=8ull",
            "-DPK_TYMASK_FOLD=8ull",
            "-DPK_PAIR_SAME",
            "-DPK_ROWS1",
            "-DPK_LL_ONLY",
            "-DPK_PAIR_HALF",
            "-DPK_HD=64",
            "-DPK_HDV=64",
            "-DPK_NH=9",
            "-DPK_NKV=3",
            "-DPK_PACKED_ONLY",
            "-DPK_FOLD_WO",
            "-DPK_EMBTY=8",
            "-DPK_SHORT",
        ] {
            assert!(some.contains(&o.to_string()), "{o}");
        }
    }
}
