//! The conformance suite: every store and decorator stack sluice runs on passes the same tests.
//!
//! [`conforms`] runs `object_store`'s own integration suite (its `integration` feature), then
//! ours for what that suite leaves out or checks only loosely: multipart uploads of many part
//! sizes (unaligned ones above all, which `LocalDisk` carries between parts and pads at the
//! end), empty uploads, ranged reads across part boundaries, `get_ranges` of every shape,
//! `rename_if_not_exists`, and not-found errors from every read. Each test below runs it
//! against one stack: `InMemory`, `LocalDisk` with direct and with buffered writes, and every
//! decorator stack the gateway and the node agent build (`EmulatedDevice`, `ChecksumStore`, and
//! the tenant `PrefixStore` over each). A stack with a checksum store also checks, after the
//! suite, that every blob left holds the checksum recorded for it; a prefixed stack, that it
//! wrote nothing outside its prefix.
//!
//! What is not run, and why:
//! - `multipart`, `multipart_with_opts`, `multipart_put_part_out_of_order` and
//!   `list_paginated` test the `MultipartStore` and `PaginatedListStore` traits, which no store
//!   of ours implements and nothing in sluice calls;
//! - conditional updates (`PutMode::Update`) are run only on stacks over `InMemory`:
//!   `LocalFileSystem` refuses them (`put_opts(.., false)` checks that it says so), as in
//!   `object_store`'s own tests of it.
//!
//! The disks live under Cargo's target directory, which is expected on a disk filesystem (one
//! that takes `O_DIRECT`); the direct run says so plainly if it is not.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt as _;
use object_store::integration::{
    copy_if_not_exists, copy_rename_nonexistent_object, get_nonexistent_object, get_opts,
    list_uses_directories_correctly, list_with_delimiter, list_with_offset_exclusivity,
    multipart_out_of_order, multipart_race_condition, put_get_attributes, put_get_delete_list,
    put_opts, rename_and_copy, stream_get,
};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{Error, GetOptions, GetRange, ObjectStore, ObjectStoreExt as _, PutPayload};
use sluice_store::{ChecksumStore, Checksums, Crc, EmulatedDevice, LocalDisk};
use tempfile::TempDir;

/// The tenant prefix the prefixed stacks use, as `sluice_s3::blob` builds it.
const TENANT: &str = "tenants/t1";
/// An emulated device fast enough that its queue costs the suite nothing measurable.
const FAST_BANDWIDTH: f64 = 1e12;
const FAST_OPS: f64 = 1e9;
const MIB: usize = 1024 * 1024;

/// Everything the suite runs; `conditional_update` says whether the store takes
/// `PutMode::Update`.
async fn conforms(store: &dyn ObjectStore, conditional_update: bool) {
    put_get_delete_list(store).await;
    list_with_offset_exclusivity(store).await;
    get_opts(store).await;
    put_opts(store, conditional_update).await;
    put_get_attributes(store).await;
    list_uses_directories_correctly(store).await;
    list_with_delimiter(store).await;
    rename_and_copy(store).await;
    copy_if_not_exists(store).await;
    copy_rename_nonexistent_object(store).await;
    let missing = get_nonexistent_object(store, None).await;
    assert!(
        matches!(missing, Err(Error::NotFound { .. })),
        "{missing:?}"
    );
    stream_get(store).await;
    multipart_out_of_order(store).await;
    // Every store of ours publishes an upload when it completes: the last to complete wins.
    multipart_race_condition(store, true).await;

    parts_of_many_sizes_are_stored_exactly(store).await;
    an_upload_of_no_bytes_is_an_empty_object(store).await;
    ranged_reads_return_exactly_the_bytes_asked_for(store).await;
    rename_if_not_exists_moves_only_onto_a_free_name(store).await;
    reads_of_a_missing_object_are_not_found(store).await;
}

/// Deterministic bytes, different at every offset of a few MiB.
fn bytes(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
        .collect()
}

async fn read(store: &dyn ObjectStore, path: &Path) -> Bytes {
    store
        .get(path)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("body")
}

/// Multipart uploads whose parts are of every awkward size (none, a byte, a block and one
/// byte either side, many parts smaller than a block, parts over a MiB), each handed over in
/// two or three chunks and all in flight at once, completing in reverse order: the object is
/// exactly the parts end to end, and reads across every part boundary see it so.
async fn parts_of_many_sizes_are_stored_exactly(store: &dyn ObjectStore) {
    let schedules: [&[usize]; 4] = [
        &[MIB + 4097, 3, 0, 4092, 2 * MIB, MIB - 1, 5 * 4096, 777],
        &[1000; 40],
        &[4095, 4096, 4097, 1, 4096, 0, 8191],
        &[3 * MIB + 5],
    ];
    for (s, sizes) in schedules.iter().enumerate() {
        let path = Path::from(format!("conformance/parts/{s}"));
        let mut upload = store.put_multipart(&path).await.expect("create");
        let mut expected = Vec::new();
        let mut boundaries = Vec::new();
        let mut parts = Vec::new();
        for (i, &len) in sizes.iter().enumerate() {
            let part = bytes(len, (s * 31 + i) as u8);
            expected.extend_from_slice(&part);
            boundaries.push(expected.len());
            let (a, b) = (len / 3, len / 3 * 2);
            let chunks = match i % 3 {
                0 => vec![part],
                1 => vec![part.slice(..a), part.slice(a..)],
                _ => vec![part.slice(..a), part.slice(a..b), part.slice(b..)],
            };
            parts.push(upload.put_part(PutPayload::from_iter(chunks)));
        }
        for part in parts.into_iter().rev() {
            part.await.expect("part");
        }
        upload.complete().await.expect("complete");

        let got = read(store, &path).await;
        assert_eq!(got.len(), expected.len(), "schedule {s}");
        assert!(got == expected, "schedule {s}: content differs");
        assert_eq!(
            store.head(&path).await.expect("head").size,
            expected.len() as u64
        );
        let len = expected.len() as u64;
        let across: Vec<Range<u64>> = boundaries
            .iter()
            .map(|&b| (b as u64).saturating_sub(5)..(b as u64 + 5).min(len))
            .filter(|r| !r.is_empty())
            .collect();
        let ranged = store.get_ranges(&path, &across).await.expect("get_ranges");
        for (r, got) in across.iter().zip(&ranged) {
            assert!(
                got[..] == expected[r.start as usize..r.end as usize],
                "schedule {s}: range {r:?}"
            );
        }
        for r in &across {
            let got = store.get_range(&path, r.clone()).await.expect("get_range");
            assert!(
                got[..] == expected[r.start as usize..r.end as usize],
                "schedule {s}: range {r:?}"
            );
        }
        store.delete(&path).await.expect("delete");
    }
}

/// An upload completed with no parts, or with only empty ones, is an object of no bytes.
async fn an_upload_of_no_bytes_is_an_empty_object(store: &dyn ObjectStore) {
    for parts in [0, 3] {
        let path = Path::from(format!("conformance/empty/{parts}"));
        let mut upload = store.put_multipart(&path).await.expect("create");
        for _ in 0..parts {
            upload
                .put_part(PutPayload::default())
                .await
                .expect("empty part");
        }
        upload.complete().await.expect("complete");
        assert_eq!(store.head(&path).await.expect("head").size, 0);
        assert!(read(store, &path).await.is_empty());
        store.delete(&path).await.expect("delete");
    }
}

/// `get_ranges` returns each range's bytes whatever the ranges' order, overlaps and
/// distances; every form of `GetRange` reads what it names; a read that starts at the end, or
/// a range that ends before it starts, is an error.
async fn ranged_reads_return_exactly_the_bytes_asked_for(store: &dyn ObjectStore) {
    let path = Path::from("conformance/ranges");
    let body = bytes(3 * MIB + 5, 77);
    let len = body.len() as u64;
    store.put(&path, body.clone().into()).await.expect("put");
    let slice = |r: &Range<u64>| body.slice(r.start as usize..r.end as usize);

    let ranges = [
        len - 1..len,
        0..1,
        10..4096,
        4000..4200,
        4096..8192,
        8192..8193,
        2 * MIB as u64 + 3..len,
        0..len,
        100..200,
        100..200,
    ];
    let got = store.get_ranges(&path, &ranges).await.expect("get_ranges");
    assert_eq!(got.len(), ranges.len());
    for (r, got) in ranges.iter().zip(&got) {
        assert!(*got == slice(r), "range {r:?}");
    }

    let head = store.head(&path).await.expect("head");
    for (range, want) in [
        (GetRange::Bounded(4095..4097), 4095..4097),
        (GetRange::Offset(len - 1), len - 1..len),
        (GetRange::Suffix(4097), len - 4097..len),
        (GetRange::Suffix(len + 10), 0..len),
    ] {
        let r = store
            .get_opts(&path, GetOptions::new().with_range(Some(range.clone())))
            .await
            .expect("get_opts");
        assert_eq!(r.range, want, "{range:?}");
        assert_eq!(r.meta.size, len);
        assert_eq!(r.meta.e_tag, head.e_tag);
        assert!(r.bytes().await.expect("body") == slice(&want), "{range:?}");
    }

    let backwards = Range { start: 10, end: 5 };
    for bad in [len..len + 1, backwards] {
        let r = store.get_range(&path, bad.clone()).await;
        assert!(r.is_err(), "get_range {bad:?} gave {r:?}");
        let r = store.get_ranges(&path, &[0..1, bad.clone()]).await;
        assert!(r.is_err(), "get_ranges {bad:?} gave {r:?}");
    }
    let r = store
        .get_opts(
            &path,
            GetOptions::new().with_range(Some(GetRange::Offset(len))),
        )
        .await;
    assert!(r.is_err(), "an offset at the end gave {r:?}");
    store.delete(&path).await.expect("delete");
}

/// `rename_if_not_exists` onto a taken name leaves both objects as they were; onto a free
/// name (in a directory not yet made) it moves the object.
async fn rename_if_not_exists_moves_only_onto_a_free_name(store: &dyn ObjectStore) {
    let from = Path::from("conformance/rename/from");
    let taken = Path::from("conformance/rename/taken");
    let free = Path::from("conformance/rename/new/dir/free");
    store.put(&from, "cats".into()).await.expect("put");
    store.put(&taken, "dogs".into()).await.expect("put");

    let refused = store.rename_if_not_exists(&from, &taken).await;
    assert!(
        matches!(refused, Err(Error::AlreadyExists { .. })),
        "{refused:?}"
    );
    assert_eq!(read(store, &from).await, "cats");
    assert_eq!(read(store, &taken).await, "dogs");

    store
        .rename_if_not_exists(&from, &free)
        .await
        .expect("rename");
    assert_eq!(read(store, &free).await, "cats");
    let gone = store.head(&from).await;
    assert!(matches!(gone, Err(Error::NotFound { .. })), "{gone:?}");

    for p in [&taken, &free] {
        store.delete(p).await.expect("delete");
    }
}

/// Every read of an object that does not exist fails as `NotFound`, not as another error.
async fn reads_of_a_missing_object_are_not_found(store: &dyn ObjectStore) {
    let path = Path::from("conformance/missing");
    let not_found = |what: &str, e: Option<Error>| {
        assert!(matches!(e, Some(Error::NotFound { .. })), "{what}: {e:?}");
    };
    not_found("head", store.head(&path).await.err());
    not_found("get", store.get(&path).await.err());
    not_found("get_range", store.get_range(&path, 0..1).await.err());
    not_found(
        "get_ranges",
        store.get_ranges(&path, &[0..1, 2..3]).await.err(),
    );
    let head = GetOptions {
        head: true,
        ..GetOptions::default()
    };
    not_found("get_opts head", store.get_opts(&path, head).await.err());
}

/// A scratch directory on the disk that holds the build (see the module doc).
fn disk_dir() -> TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir")
}

fn local_disk(dir: &TempDir) -> Arc<LocalDisk> {
    let disk = LocalDisk::open(dir.path()).expect("open");
    assert!(
        disk.direct(),
        "{} refuses O_DIRECT: the conformance suite needs Cargo's target directory on a disk \
         filesystem",
        dir.path().display()
    );
    Arc::new(disk)
}

/// After the suite, every object the checksum store holds has the checksum recorded for it
/// (every object left was written, copied or renamed through it).
async fn checksums_match_the_bytes(store: &ChecksumStore, sums: &Checksums) {
    let listed: Vec<_> = store.list(None).try_collect().await.expect("list");
    assert!(!listed.is_empty(), "the suite leaves objects behind");
    for meta in listed {
        let body = read(store, &meta.location).await;
        assert_eq!(
            sums.lookup(meta.location.as_ref()),
            Some(Crc::of(&body)),
            "{}",
            meta.location
        );
    }
}

/// After the suite, everything in the store under a tenant prefix is under that prefix.
async fn nothing_outside_the_prefix(inner: &dyn ObjectStore) {
    let listed: Vec<_> = inner.list(None).try_collect().await.expect("list");
    assert!(!listed.is_empty(), "the suite leaves objects behind");
    let prefix = Path::from(TENANT);
    for meta in listed {
        assert!(
            meta.location.prefix_matches(&prefix),
            "{} is outside {TENANT}",
            meta.location
        );
    }
}

#[tokio::test]
async fn in_memory_conforms() {
    conforms(&InMemory::new(), true).await;
}

#[tokio::test]
async fn local_disk_with_direct_writes_conforms() {
    let dir = disk_dir();
    conforms(&*local_disk(&dir), false).await;
}

/// Buffered writes on a disk that would take direct ones, as on a filesystem that refuses
/// `O_DIRECT`.
#[tokio::test]
async fn local_disk_with_buffered_writes_conforms() {
    let dir = disk_dir();
    let disk = LocalDisk::open_with(dir.path(), false).expect("open");
    assert!(!disk.direct());
    conforms(&disk, false).await;
}

/// The device's sleeps are on tokio's clock: in paused time a realistic device costs nothing.
#[tokio::test(start_paused = true)]
async fn emulated_device_over_memory_conforms() {
    let device = EmulatedDevice::new(Arc::new(InMemory::new()), 1e9, 10_000.0);
    conforms(&device, true).await;
}

#[tokio::test]
async fn checksum_store_over_local_disk_conforms() {
    let dir = disk_dir();
    let sums = Arc::new(Checksums::default());
    let store = ChecksumStore::new(local_disk(&dir), Arc::clone(&sums));
    conforms(&store, false).await;
    checksums_match_the_bytes(&store, &sums).await;
}

/// The node agent's stack.
#[tokio::test]
async fn tenant_prefix_over_checksum_store_over_local_disk_conforms() {
    let dir = disk_dir();
    let sums = Arc::new(Checksums::default());
    let store = Arc::new(ChecksumStore::new(local_disk(&dir), Arc::clone(&sums)));
    conforms(&PrefixStore::new(Arc::clone(&store), TENANT), false).await;
    checksums_match_the_bytes(&store, &sums).await;
    nothing_outside_the_prefix(&*store).await;
}

/// The gateway's stack with `[backend.emulate]` set, on real I/O: a device fast enough to
/// cost nothing.
#[tokio::test]
async fn tenant_prefix_over_emulated_device_over_local_disk_conforms() {
    let dir = disk_dir();
    let device = Arc::new(EmulatedDevice::new(
        local_disk(&dir),
        FAST_BANDWIDTH,
        FAST_OPS,
    ));
    conforms(&PrefixStore::new(Arc::clone(&device), TENANT), false).await;
    nothing_outside_the_prefix(&*device).await;
}

/// The gateway's stack.
#[tokio::test]
async fn tenant_prefix_over_local_disk_conforms() {
    let dir = disk_dir();
    let disk = local_disk(&dir);
    conforms(&PrefixStore::new(Arc::clone(&disk), TENANT), false).await;
    nothing_outside_the_prefix(&*disk).await;
}
