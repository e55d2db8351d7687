//! The reference model: every write the node acknowledged, per key and in order, and what the
//! upstream has shown of each key so far; each visible upstream change is checked against it
//! as it is replayed from the twin's log.
//!
//! A write "exists" for an upstream event from the moment it was issued (its stamp is the
//! length of the upstream log then): the drain may see a write's op from its catalog commit
//! on, before the write returns. Every body the model writes is unique per key (copies
//! included), so the bytes of an upstream PUT name the write they carry. A DELETE does not
//! say which delete of its key it carries, so the model keeps every delete it may be
//! ([`Shown::Deleted`]) and narrows them as later checks assume one.
//!
//! The invariants, as the journal's module doc states them:
//! - per key, upstream shows writes in write order, never an older one after a newer one
//!   (which covers a delete landing out of order with the writes around it on its key);
//! - a write shows again only after a restart or a fault injected into a call on its key
//!   (exactly once otherwise);
//! - when a delete lands, every other key of the tenant shows at least its last write before
//!   the delete, unless that key was written again after the delete (its successor op carries
//!   it, and the delete does not wait for later writes);
//! - when a commit marker lands, every other key under its prefix shows at least its last
//!   write before the marker, unless that write was followed by a delete or a marker put
//!   (ops the marker does not wait for, so that the waits cannot form a cycle); a shard
//!   rewritten after the marker holds the marker back, so it needs no exception;
//! - an evicted local copy is exactly what upstream shows of its key;
//! - once the drain is idle, upstream holds exactly the node's last write of every key.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use bytes::Bytes;

use crate::journal::prefix_of;
use crate::upstream::memory::Event;

/// What a write left at its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Put(Bytes),
    Delete,
}

#[derive(Debug, Clone)]
struct Write {
    /// Position among all the node's writes.
    order: usize,
    value: Value,
    /// The upstream log's length when the write was issued.
    stamp: usize,
    marker: bool,
}

/// Which write of a key upstream shows now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum Shown {
    #[default]
    Nothing,
    /// This put (index into the key's writes), last PUT upstream at this log index.
    Put { write: usize, at: usize },
    /// One of these deletes (ascending, never empty).
    Deleted(Vec<usize>),
}

impl Shown {
    /// The earliest write it may be.
    fn floor(&self) -> usize {
        match self {
            Shown::Nothing => 0,
            Shown::Put { write, .. } => *write,
            Shown::Deleted(d) => d[0],
        }
    }

    /// May it be write `l` or a later one? Narrowed to those if so.
    fn reach(&mut self, l: usize) -> bool {
        match self {
            Shown::Nothing => false,
            Shown::Put { write, .. } => *write >= l,
            Shown::Deleted(d) => {
                d.retain(|&j| j >= l);
                if d.is_empty() {
                    return false;
                }
                true
            }
        }
    }
}

#[derive(Debug, Default)]
struct Key {
    writes: Vec<Write>,
    shown: Shown,
    /// The local copy of the last write was evicted.
    evicted: bool,
}

impl Key {
    fn show(&self) -> String {
        match &self.shown {
            Shown::Nothing => "nothing".into(),
            Shown::Put { write, .. } => show(Some(&self.writes[*write].value)),
            Shown::Deleted(_) => "a delete".into(),
        }
    }
}

/// Counts for the run's summary line.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub writes: usize,
    pub puts_upstream: usize,
    pub deletes_upstream: usize,
    pub repeats: usize,
    pub marker_checks: usize,
    pub evictions: usize,
}

/// See the module doc.
#[derive(Debug, Default)]
pub struct Model {
    keys: BTreeMap<String, Key>,
    writes: usize,
    /// Upstream events replayed so far.
    seen: usize,
    /// The upstream log's length at each restart.
    restarts: Vec<usize>,
    /// The upstream log's length when a fault was injected, and the call's key.
    faults: Vec<(usize, String)>,
    pub stats: Stats,
}

fn show(value: Option<&Value>) -> String {
    match value {
        None => "nothing".into(),
        Some(Value::Delete) => "a delete".into(),
        Some(Value::Put(b)) => format!("{:?}", name(b)),
    }
}

/// The name a body carries (everything before its first `|`).
pub fn name(bytes: &[u8]) -> String {
    let end = bytes
        .iter()
        .position(|b| *b == b'|')
        .unwrap_or(bytes.len().min(40));
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

impl Model {
    /// Records an acknowledged write issued when the upstream log had `stamp` events.
    pub fn write(&mut self, key: &str, value: Value, marker: bool, stamp: usize) {
        let k = self.keys.entry(key.to_owned()).or_default();
        if let Value::Put(b) = &value {
            assert!(
                !k.writes.iter().any(|w| w.value == value),
                "the model's bodies must be unique per key: {} again",
                name(b)
            );
        }
        k.writes.push(Write {
            order: self.writes,
            value,
            stamp,
            marker,
        });
        k.evicted = false;
        self.writes += 1;
        self.stats.writes += 1;
    }

    pub fn restarted(&mut self, stamp: usize) {
        self.restarts.push(stamp);
    }

    pub fn fault(&mut self, stamp: usize, key: String) {
        self.faults.push((stamp, key));
    }

    /// The bytes of the last write to `key`, if it is a put.
    pub fn last_put(&self, key: &str) -> Option<&Bytes> {
        match self.keys.get(key)?.writes.last()?.value {
            Value::Put(ref b) => Some(b),
            Value::Delete => None,
        }
    }

    /// Keys whose last write is a put, on the node or evicted from it.
    pub fn live_keys(&self) -> Vec<String> {
        self.keys
            .iter()
            .filter(|(_, k)| matches!(k.writes.last(), Some(w) if matches!(w.value, Value::Put(_))))
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Keys whose last write is a put still on the node (as far as the model knows).
    pub fn local_keys(&self) -> Vec<String> {
        self.keys
            .iter()
            .filter(|(_, k)| {
                !k.evicted && matches!(k.writes.last(), Some(w) if matches!(w.value, Value::Put(_)))
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    pub fn keys_under(&self, prefix: &str) -> Vec<String> {
        self.live_keys()
            .into_iter()
            .filter(|k| k.starts_with(prefix))
            .collect()
    }

    /// The local copy of `key` is gone from the node's catalog: it must be exactly what
    /// upstream shows.
    pub fn evicted(&mut self, key: &str, upstream: Option<&Bytes>) -> Result<(), String> {
        let expected = self.last_put(key).cloned();
        if expected.is_none() || upstream != expected.as_ref() {
            return Err(format!(
                "{key} was evicted from the node while upstream shows {} and the node's last \
                 write is {}",
                upstream.map_or("nothing".into(), |b| format!("{:?}", name(b))),
                expected.map_or("not a put".into(), |b| format!("{:?}", name(&b))),
            ));
        }
        if let Some(k) = self.keys.get_mut(key) {
            k.evicted = true;
        }
        self.stats.evictions += 1;
        Ok(())
    }

    /// How many upstream events have been replayed.
    pub fn seen(&self) -> usize {
        self.seen
    }

    /// Replays the upstream events that follow those seen so far.
    pub fn observe(&mut self, events: &[Event]) -> Result<(), String> {
        for e in events {
            let i = self.seen;
            match e {
                Event::Put { key, bytes, .. } => self.put(i, key, bytes)?,
                Event::Delete { key, .. } => self.delete(i, key)?,
                Event::CreateBucket { .. } | Event::DeleteBucket { .. } => {}
            }
            self.seen += 1;
        }
        Ok(())
    }

    fn put(&mut self, i: usize, key: &str, bytes: &Bytes) -> Result<(), String> {
        let Some(k) = self.keys.get(key) else {
            return Err(format!("upstream event {i}: {key} was never written here"));
        };
        let value = Value::Put(bytes.clone());
        let Some(j) = k.writes.iter().position(|w| w.value == value) else {
            return Err(format!(
                "upstream event {i}: {key} holds {} bytes ({:?}) that no write of the node \
                 left there: corrupt or spliced",
                bytes.len(),
                name(bytes)
            ));
        };
        if k.writes[j].stamp > i {
            return Err(format!(
                "upstream event {i}: {key} shows a write not issued yet"
            ));
        }
        match k.shown {
            _ if j < k.shown.floor() => {
                return Err(format!(
                    "upstream event {i}: {key} went back from {} to the older {} (out of order)",
                    k.show(),
                    show(Some(&value))
                ));
            }
            Shown::Put { write, at: since } if write == j => {
                if !self.excused(key, since, i) {
                    return Err(format!(
                        "upstream event {i}: {key} received {} again (first at event {since}) \
                         with no restart or fault on it in between",
                        name(bytes)
                    ));
                }
                self.stats.repeats += 1;
            }
            _ => {}
        }
        if k.writes[j].marker {
            self.marker_landed(i, key, j)?;
        }
        let k = self.keys.get_mut(key).ok_or("gone")?;
        k.shown = Shown::Put { write: j, at: i };
        self.stats.puts_upstream += 1;
        Ok(())
    }

    fn delete(&mut self, i: usize, key: &str) -> Result<(), String> {
        let Some(k) = self.keys.get(key) else {
            return Err(format!(
                "upstream event {i}: a delete of {key}, never written here"
            ));
        };
        let deletes: Vec<usize> = (k.shown.floor()..k.writes.len())
            .filter(|&j| k.writes[j].value == Value::Delete && k.writes[j].stamp <= i)
            .collect();
        if deletes.is_empty() {
            return Err(format!(
                "upstream event {i}: a delete of {key} landed after {} (no delete of it at or \
                 after that write): out of order with the writes around it",
                k.show()
            ));
        }
        // The earliest delete it may be is the one that waited for the fewest writes.
        let order = k.writes[deletes[0]].order;
        let mut narrowed = Vec::new();
        for (other, o) in &self.keys {
            if other == key {
                continue;
            }
            let Some(l) = o.writes.iter().rposition(|w| w.order < order) else {
                continue;
            };
            let mut shown = o.shown.clone();
            let reached = shown.reach(l);
            let rewritten = o.writes.iter().any(|w| w.order > order && w.stamp <= i);
            if reached {
                narrowed.push((other.clone(), shown));
            } else if !rewritten {
                return Err(format!(
                    "upstream event {i}: the delete of {key} landed while {other} shows {} \
                     upstream, before its earlier write {}",
                    o.show(),
                    show(Some(&o.writes[l].value))
                ));
            }
        }
        self.narrow(narrowed);
        let k = self.keys.get_mut(key).ok_or("gone")?;
        k.shown = Shown::Deleted(deletes);
        self.stats.deletes_upstream += 1;
        Ok(())
    }

    /// A marker (write `j` of `key`) became visible at event `i`: its checkpoint must be.
    fn marker_landed(&mut self, i: usize, key: &str, j: usize) -> Result<(), String> {
        let order = self.keys[key].writes[j].order;
        let prefix = prefix_of(key);
        let mut missing = String::new();
        let mut narrowed = Vec::new();
        for (other, o) in self.keys.range(prefix.to_owned()..) {
            if !other.starts_with(prefix) {
                break;
            }
            if other == key {
                continue;
            }
            let Some(l) = o.writes.iter().rposition(|w| w.order < order) else {
                continue;
            };
            let mut shown = o.shown.clone();
            let reached = shown.reach(l);
            let excused = o.writes[l + 1..]
                .iter()
                .any(|w| w.stamp <= i && (w.value == Value::Delete || w.marker));
            if reached {
                narrowed.push((other.clone(), shown));
            } else if !excused {
                let _ = write!(
                    missing,
                    " {other} (upstream shows {}, the checkpoint has {});",
                    o.show(),
                    show(Some(&o.writes[l].value))
                );
            }
        }
        self.stats.marker_checks += 1;
        if missing.is_empty() {
            self.narrow(narrowed);
            Ok(())
        } else {
            Err(format!(
                "upstream event {i}: marker {key} became visible before its checkpoint:{missing}"
            ))
        }
    }

    /// Keeps only the deletes of each key a check has assumed upstream shows.
    fn narrow(&mut self, narrowed: Vec<(String, Shown)>) {
        for (key, shown) in narrowed {
            if let Some(k) = self.keys.get_mut(&key) {
                k.shown = shown;
            }
        }
    }

    /// Was there a restart, or a fault injected into a call on `key`, from event `since` to `i`?
    fn excused(&self, key: &str, since: usize, i: usize) -> bool {
        self.restarts.iter().any(|&r| r > since && r <= i)
            || self
                .faults
                .iter()
                .any(|(s, k)| k == key && *s >= since && *s <= i)
    }

    /// The drain is idle: upstream must hold exactly the last write of every key.
    pub fn settled(&self, upstream: &BTreeMap<String, Bytes>) -> Result<(), String> {
        let mut wrong = String::new();
        for (key, k) in &self.keys {
            let expected = match k.writes.last().map(|w| &w.value) {
                Some(Value::Put(b)) => Some(b),
                _ => None,
            };
            if upstream.get(key) != expected {
                let _ = write!(
                    wrong,
                    " {key}: upstream {}, node {};",
                    upstream
                        .get(key)
                        .map_or("nothing".into(), |b| format!("{:?}", name(b))),
                    expected.map_or("deleted".into(), |b| format!("{:?}", name(b)))
                );
            }
        }
        for key in upstream.keys() {
            if !self.keys.contains_key(key) {
                let _ = write!(wrong, " {key}: upstream only;");
            }
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(format!("once the drain was idle:{wrong}"))
        }
    }
}
