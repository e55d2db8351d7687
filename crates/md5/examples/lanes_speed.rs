//! How fast the sixteen-lane MD5 kernel advances 1, 4, 8 and 16 bodies at once (4 MiB each,
//! four passes): `cargo run --release -p sluice-md5 --example lanes_speed`. A measurement,
//! not a test; the state it prints keeps the work from being optimised away.

use std::time::Instant;

use sluice_md5::lanes::{Run, available, compress16};

const BLOCKS: usize = 1 << 16;

fn main() {
    if !available() {
        println!("this CPU has no AVX-512F: bodies are hashed by the scalar core");
        return;
    }
    let data: Vec<Vec<[u8; 64]>> = (0..16u8).map(|k| vec![[k; 64]; BLOCKS]).collect();
    for active in [1_u8, 4, 8, 16] {
        let mut states = [[0x6745_2301_u32, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476]; 16];
        let runs: [Option<Run<'_>>; 16] =
            std::array::from_fn(|k| (k < usize::from(active)).then(|| &data[k][..]));
        let started = Instant::now();
        let mut steps = 0_u32;
        for _ in 0..4 {
            steps += u32::try_from(compress16(&mut states, &runs)).expect("blocks");
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "{active:2} bodies: {:5.2} GB/s, {:4.0} ns per block step (state {:08x})",
            f64::from(steps) * 64.0 * f64::from(active) / secs / 1e9,
            secs / f64::from(steps) * 1e9,
            states[0][0],
        );
    }
}
