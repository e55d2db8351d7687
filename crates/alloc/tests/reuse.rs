//! Large blocks freed are reused, as glibc's `malloc` reuses them: a block allocated, filled
//! and freed in a loop does not fault in fresh pages every time (`posix_memalign`, the obvious
//! way to align them, did: every page of every block, ten times slower).

#[global_allocator]
static ALLOC: sluice_alloc::PageAligned = sluice_alloc::PageAligned;

/// Minor page faults of this process so far.
#[cfg(target_os = "linux")]
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("stat");
    // Fields after the command name (which ends with the last ')'): state is the first,
    // minflt the eighth.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .expect("comm")
        .1
        .split_whitespace()
        .collect();
    fields[7].parse().expect("minflt")
}

#[cfg(target_os = "linux")]
#[test]
fn a_freed_large_block_is_reused_without_faulting_fresh_pages() {
    const SIZE: usize = 4 << 20;
    const ROUNDS: u8 = 200;
    let before = minor_faults();
    for i in 0..ROUNDS {
        let mut v: Vec<u8> = Vec::with_capacity(SIZE);
        assert!(v.as_ptr().addr().is_multiple_of(sluice_alloc::PAGE));
        v.resize(SIZE, i);
        std::hint::black_box(&v);
    }
    let faults = minor_faults() - before;
    // Fresh pages every time would be ROUNDS * SIZE / 4096 = 204,800 faults; reuse faults
    // in one block's pages, and a few more.
    let fresh = (usize::from(ROUNDS) * SIZE / 4096) as u64;
    assert!(
        faults < fresh / 10,
        "{faults} faults for {ROUNDS} blocks of {SIZE} bytes"
    );
}
