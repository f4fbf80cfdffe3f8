//! Replays the committed corpus (`fuzz/corpus/<target>/`) and every saved crash
//! (`fuzz/artifacts/<target>/`) through the fuzz targets' code, outside libFuzzer: a quick
//! check that all of them still run clean. With `MOLLA_FUZZ_WRITE_SEEDS=1` it first (re)writes
//! the generated seeds (`molla_fuzz::seeds`).

use std::path::Path;

type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 4] = [
    ("gguf", molla_fuzz::gguf::run),
    ("tokenizer", molla_fuzz::tokenizer::run),
    ("template", molla_fuzz::template::run),
    ("http", molla_fuzz::http::run),
];

#[test]
fn corpus_and_artifacts_run_clean() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("MOLLA_FUZZ_WRITE_SEEDS").is_some() {
        for (target, name, bytes) in molla_fuzz::seeds::seeds() {
            let dir = root.join("corpus").join(target);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
    let mut n = 0;
    for (target, run) in TARGETS {
        for sub in ["corpus", "artifacts"] {
            let Ok(entries) = std::fs::read_dir(root.join(sub).join(target)) else {
                continue;
            };
            let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
            paths.sort();
            for p in paths {
                let bytes = std::fs::read(&p).unwrap();
                eprintln!("{}", p.display());
                run(&bytes);
                n += 1;
            }
        }
    }
    assert!(n > 0, "no corpus found under {}", root.display());
}
