//! 1,000 mutated GGUF files (bit flips and byte overwrites concentrated in the header and
//! directory, truncations, size fields set to huge values) given to `molla inspect` and
//! `molla logits`. A mutation may leave a valid file (a flipped weight bit), so success is
//! allowed; what is not: a panic, a signal, a multi-line error, more than 5 s, or more than
//! 1 GiB of address space (enforced with `ulimit -v`, so an oversized allocation aborts).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

/// xorshift64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn mutate(rng: &mut Rng, valid: &[u8], header: usize) -> Vec<u8> {
    let mut b = valid.to_vec();
    // Most mutations hit the header and tensor directory, where the parser makes decisions.
    let at = |rng: &mut Rng, len: usize| {
        if rng.below(4) == 0 {
            rng.below(len)
        } else {
            rng.below(header.min(len))
        }
    };
    match rng.below(5) {
        0 => {
            for _ in 0..1 + rng.below(8) {
                let i = at(rng, b.len());
                b[i] ^= 1 << rng.below(8);
            }
        }
        1 => {
            let i = at(rng, b.len());
            b[i] = 0xff;
        }
        2 => b.truncate(rng.below(valid.len())),
        3 => {
            // An 8-byte field set to a huge value (counts, lengths, dims, offsets are u64).
            let i = at(rng, b.len() - 8);
            let v = [u64::MAX, 1 << 63, 1 << 40, 1 << 32, u32::MAX as u64][rng.below(5)];
            b[i..i + 8].copy_from_slice(&v.to_le_bytes());
        }
        _ => {
            let i = at(rng, b.len() - 4);
            let v = rng.next() as u32;
            b[i..i + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
    b
}

fn run_limited(args: &[&str]) -> (Option<i32>, String, Duration) {
    let start = Instant::now();
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 1048576; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_molla"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        common::text(&out.stderr),
        start.elapsed(),
    )
}

#[test]
fn a_thousand_mutated_files_never_crash() {
    let valid = common::tiny_chat_model(None);
    let header = gguf::GgufFile::from_bytes(valid.clone())
        .unwrap()
        .data_offset() as usize;
    let dir = common::scratch("mutated");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut refused, mut accepted) = (0, 0);
    for i in 0..1000 {
        let path = dir.join(format!("m{i}.gguf"));
        std::fs::write(&path, mutate(&mut rng, &valid, header)).unwrap();
        let p = path.to_str().unwrap();
        for args in [
            vec!["inspect", p],
            vec![
                "logits",
                "--model",
                p,
                "--tokens",
                "1,2,3",
                "--threads",
                "1",
            ],
        ] {
            let (code, err, took) = run_limited(&args);
            let what = format!("mutation {i}, molla {}", args[0]);
            assert!(took < Duration::from_secs(5), "{what}: took {took:?}");
            match code {
                Some(0) => accepted += 1,
                Some(2) => {
                    refused += 1;
                    assert!(err.starts_with("error: "), "{what}: {err}");
                    assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
                }
                other => panic!("{what}: exit {other:?} (a crash or signal); stderr: {err}"),
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    eprintln!(
        "mutated files: {refused} runs refused with an error, {accepted} ran (mutation left a valid file)"
    );
    assert!(
        refused > 1000,
        "most mutations should be refused: {refused}"
    );
}
